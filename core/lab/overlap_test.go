package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// toyRace is a toy experiment whose claim needs an overlap: two writers
// update the one row. Serial, they never meet; blocked, the second writer
// (actor b's session) waits at the first's row lock until the first
// commits. The first writer is actor a's session, or — with nonActor —
// the lab's own untagged session, which is no actor.
func toyRace(blocked, nonActor bool) Experiment {
	return Experiment{
		ID: "toy/race", Claim: "two writers at once leave the value non-negative",
		Invariants: []string{"toy"}, Overlap: true,
		Run: func(x *X) {
			toyWrite(x, func(ctx context.Context, db *pgxpool.Pool) {
				sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, 1)`)
				firstPool := actorPool(x, db, "a")
				if nonActor {
					firstPool = db
				}
				first, err := firstPool.Begin(ctx)
				if err != nil {
					x.Fatalf("begin: %v", err)
				}
				defer func() { _ = first.Rollback(ctx) }()
				if _, err := first.Exec(ctx, `UPDATE lab_toy SET v = v + 1`); err != nil {
					x.Fatalf("first: %v", err)
				}
				if !blocked {
					if err := first.Commit(ctx); err != nil {
						x.Fatalf("commit: %v", err)
					}
				}
				done := make(chan error, 1)
				second := actorPool(x, db, "b")
				go func() { _, err := second.Exec(ctx, `UPDATE lab_toy SET v = v + 1`); done <- err }()
				if blocked { // the second is in flight, at the lock: commit the first once the watcher judged it
					waitFor(x, "actor b's session waits at the row lock", func() bool {
						var n int
						err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
						   WHERE application_name = $1 AND wait_event_type = 'Lock'`, ActorApplicationName("b")).Scan(&n)
						return err == nil && n == 1
					})
					// An overlap recorded (the watcher stops there), or two
					// whole samples begun after the wait was visible: the
					// watcher has seen the wait, whatever it made of it.
					seen := x.samples.Load()
					waitFor(x, "the watcher samples the wait", func() bool { return x.Overlapped() || x.samples.Load() >= seen+2 })
					if err := first.Commit(ctx); err != nil {
						x.Fatalf("commit: %v", err)
					}
				}
				if err := <-done; err != nil {
					x.Fatalf("second: %v", err)
				}
				x.Step(Step{Actor: "b", Action: "add 1", Outcome: Accepted, DBTime: x.DBNow(db)})
			})
		},
	}
}

// actorPool opens a one-session pool on db's database tagged as actor's.
func actorPool(x *X, db *pgxpool.Pool, actor string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(db.Config().ConnString())
	if err != nil {
		x.Fatalf("parse: %v", err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = ActorApplicationName(actor)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		x.Fatalf("connect: %v", err)
	}
	x.Cleanup(pool.Close)
	return pool
}

// waitFor polls cond until it holds (a poll, not a boundary: the
// boundary is the lock), failing after 30 s.
func waitFor(x *X, what string, cond func() bool) {
	for until := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(until) {
			x.Fatalf("timed out: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A claim that says "at once" fails when the run was serial: no overlap
// observed, never a silent pass.
func TestASerialRunOfAnAtOnceClaimFails(t *testing.T) {
	r := run(t, toyRace(false, false), Guarded)
	if r.Verdict != Broke || !strings.Contains(strings.Join(r.Failures, "\n"), "no overlap observed") {
		t.Fatalf("verdict %s, failures %q: want broke with \"no overlap observed\"", r.Verdict, r.Failures)
	}
}

// A lock wait in pg_stat_activity is an observed overlap, and it is a step
// of the timeline with the database's times.
func TestALockWaitIsAnObservedOverlap(t *testing.T) {
	r := run(t, toyRace(true, false), Guarded)
	if r.Verdict != Held {
		t.Fatalf("verdict %s, failures %q", r.Verdict, r.Failures)
	}
	var seen bool
	for _, s := range r.Timeline {
		if strings.HasPrefix(s.Action, "overlap: a lock wait") {
			seen = true
			if s.DBTime.IsZero() || s.DBEnd.Before(s.DBTime) {
				t.Errorf("the overlap step has no database interval: %+v", s)
			}
		}
	}
	if !seen {
		t.Fatalf("no overlap step in %+v", r.Timeline)
	}
}

// A lock wait is evidence only between two actors: actor b waiting on a
// lock held by the lab's own session (no actor) is no overlap, and the run
// fails with "no overlap observed" — though the watcher sampled the wait.
func TestALockWaitOnANonActorIsNoOverlap(t *testing.T) {
	r := run(t, toyRace(true, true), Guarded)
	if r.Verdict != Broke || !strings.Contains(strings.Join(r.Failures, "\n"), "no overlap observed") {
		t.Fatalf("verdict %s, failures %q: want broke with \"no overlap observed\"", r.Verdict, r.Failures)
	}
	for _, s := range r.Timeline {
		if strings.HasPrefix(s.Action, "overlap:") {
			t.Fatalf("an overlap was recorded from a non-actor's lock: %+v", s)
		}
	}
}

// x.Overlap fails when the intervals do not share an instant.
func TestDisjointIntervalsAreNoOverlap(t *testing.T) {
	t0 := time.Now()
	e := Experiment{ID: "toy/disjoint", Invariants: []string{"toy"}, Run: func(x *X) {
		toyWrite(x, func(context.Context, *pgxpool.Pool) {
			x.Overlap("claims", Interval{"a", t0, t0.Add(time.Second)}, Interval{"b", t0.Add(time.Second), t0.Add(2 * time.Second)})
		})
	}}
	r := run(t, e, Guarded)
	if r.Verdict != Broke || !strings.Contains(strings.Join(r.Failures, "\n"), "no overlap observed: claims") {
		t.Fatalf("verdict %s, failures %q", r.Verdict, r.Failures)
	}
}
