package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// toyRace is a toy experiment whose claim needs an overlap: two actors
// update the one row. Serial, they never meet; blocked, the second waits
// at the first's row lock until the first commits.
func toyRace(blocked bool) Experiment {
	return Experiment{
		ID: "toy/race", Claim: "two writers at once leave the value non-negative",
		Invariants: []string{"toy"}, Overlap: true,
		Run: func(x *X) {
			toyWrite(x, func(ctx context.Context, db *pgxpool.Pool) {
				sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, 1)`)
				first, err := db.Begin(ctx)
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
				go func() { _, err := db.Exec(ctx, `UPDATE lab_toy SET v = v + 1`); done <- err }()
				if blocked { // the second is in flight, at the lock: commit the first once seen
					for until := time.Now().Add(30 * time.Second); !x.Overlapped(); {
						if time.Now().After(until) {
							x.Fatalf("the watcher never saw the second writer wait at the lock")
						}
						time.Sleep(time.Millisecond) // a poll, not a boundary: the boundary is the lock
					}
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

// A claim that says "at once" fails when the run was serial: no overlap
// observed, never a silent pass.
func TestASerialRunOfAnAtOnceClaimFails(t *testing.T) {
	r := run(t, toyRace(false), Guarded)
	if r.Verdict != Broke || !strings.Contains(strings.Join(r.Failures, "\n"), "no overlap observed") {
		t.Fatalf("verdict %s, failures %q: want broke with \"no overlap observed\"", r.Verdict, r.Failures)
	}
}

// A lock wait in pg_stat_activity is an observed overlap, and it is a step
// of the timeline with the database's times.
func TestALockWaitIsAnObservedOverlap(t *testing.T) {
	r := run(t, toyRace(true), Guarded)
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
