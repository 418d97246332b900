package lab

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// toyExplore is an experiment whose actors only step: every order of their
// steps is a schedule, so an exhaustive exploration runs exactly the
// multinomial count of them.
func toyExplore(actors ...ActorSpec) Experiment {
	return Experiment{
		ID: "toy/steps", Claim: "actors that only step", Invariants: []string{"toy"},
		Explore: &Explore{Claim: "every order of the steps", Actors: actors, Run: func(x *X) {
			toyWrite(x, func(context.Context, *pgxpool.Pool) {})
			x.Interleave(func(a *Actor) {
				for _, s := range actors[a.Index].Steps {
					a.Step(s.Label)
					a.Say(s.Label, "done", "")
				}
			})
		}},
	}
}

// multisetPermutations lists every order of the actors' steps by name.
func multisetPermutations(actors []ActorSpec) map[string]bool {
	left := make([]int, len(actors))
	for i, a := range actors {
		left[i] = len(a.Steps)
	}
	out := map[string]bool{}
	var walk func(prefix []string)
	walk = func(prefix []string) {
		done := true
		for i := range actors {
			if left[i] > 0 {
				done = false
				left[i]--
				walk(append(slices.Clone(prefix), actors[i].Name))
				left[i]++
			}
		}
		if done {
			out[strings.Join(prefix, ",")] = true
		}
	}
	walk(nil)
	return out
}

// Without locks, the exploration runs every interleaving of the actors'
// steps once: (2+1+1)!/(2!·1!·1!) = 12 for A:2, B:1, C:1 (each schedule
// clones a database: twelve keep the count checkable without a long run).
func TestExploreFindsEverySchedule(t *testing.T) {
	t.Parallel()
	actors := []ActorSpec{
		{Name: "A", Steps: Steps("a1", "a2")},
		{Name: "B", Steps: Steps("b1")},
		{Name: "C", Steps: Steps("c1")},
	}
	e := toyExplore(actors...)
	// Two at a time: the worklist hands each decision's branches out once.
	ex := ExploreExperiment(context.Background(), e, toyEnv{t}, ExploreOptions{Variant: Guarded, Parallel: 2})
	if ex.Orders != 12 {
		t.Fatalf("Orders = %d, want the multinomial 4!/(2!1!1!) = 12", ex.Orders)
	}
	want := multisetPermutations(actors)
	got := map[string]bool{}
	for _, s := range ex.Schedules {
		if got[s.Schedule] {
			t.Errorf("schedule %s ran twice", s.Schedule)
		}
		got[s.Schedule] = true
		if !want[s.Schedule] {
			t.Errorf("schedule %s is not an interleaving of the actors' steps", s.Schedule)
		}
		if s.Verdict != Held {
			t.Errorf("schedule %s: %s %v", s.Schedule, s.Verdict, s.Failures)
		}
	}
	if ex.Mode != "exhaustive" || ex.Count != 12 || len(got) != len(want) || ex.Verdict != Held || ex.Exit != 0 {
		t.Fatalf("mode %s, %d schedules (%d distinct, want %d), verdict %s exit %d: %s",
			ex.Mode, ex.Count, len(got), len(want), ex.Verdict, ex.Exit, ex.Summary)
	}
	if ex.Summary != "12 schedules: guarded holds in 12 of 12" {
		t.Fatalf("summary %q", ex.Summary)
	}
	if ex.Schedules[0].Schedule != "A,A,B,C" || ex.Schedules[11].Schedule != "C,B,A,A" {
		t.Fatalf("the table is not sorted by schedule: first %s, last %s", ex.Schedules[0].Schedule, ex.Schedules[11].Schedule)
	}
}

// Steps that declare disjoint keys commute: one order of each class is
// run, the rest are skipped as equivalent; and above --max the
// exploration samples, repeatably for one seed.
func TestExploreReducesDisjointStepsAndSamplesAboveMax(t *testing.T) {
	t.Parallel()
	disjoint := toyExplore(
		ActorSpec{Name: "A", Steps: []StepSpec{{Label: "a1", Touches: []string{"row 1"}}, {Label: "a2", Touches: []string{"row 1"}}}},
		ActorSpec{Name: "B", Steps: []StepSpec{{Label: "b1", Touches: []string{"row 2"}}, {Label: "b2", Touches: []string{"row 2"}}}},
	)
	ex := ExploreExperiment(context.Background(), disjoint, toyEnv{t}, ExploreOptions{Variant: Guarded})
	if ex.Count != 1 || ex.Reduced == 0 || ex.Schedules[0].Schedule != "A,A,B,B" {
		t.Fatalf("disjoint steps: %d schedules, %d reduced, first %+v; want the one order A,A,B,B", ex.Count, ex.Reduced, ex.Schedules)
	}

	all := toyExplore(ActorSpec{Name: "A", Steps: Steps("a1", "a2")}, ActorSpec{Name: "B", Steps: Steps("b1", "b2")})
	sample := func() []string {
		ex := ExploreExperiment(context.Background(), all, toyEnv{t}, ExploreOptions{Variant: Guarded, Max: 3, Seed: 7})
		if ex.Mode != "sampled" || ex.Count != 3 || ex.Verdict != Held {
			t.Fatalf("sampled: mode %s, %d schedules, %s", ex.Mode, ex.Count, ex.Summary)
		}
		var out []string
		for _, s := range ex.Schedules {
			out = append(out, s.Schedule)
		}
		return out
	}
	if a, b := sample(), sample(); !slices.Equal(a, b) {
		t.Fatalf("seed 7 sampled %v, then %v", a, b)
	}
}

// lockToy: two actors each take the row in one step and commit in the
// next. The second to update waits on the first's row lock.
var lockToy = Experiment{
	ID: "toy/lock", Claim: "two transactions on one row", Invariants: []string{"toy"},
	Explore: &Explore{
		Claim:  "the second update waits for the first to commit",
		Actors: []ActorSpec{{Name: "A", Steps: Steps("update", "commit")}, {Name: "B", Steps: Steps("update", "commit")}},
		Run: func(x *X) {
			var url string
			toyWrite(x, func(_ context.Context, db *pgxpool.Pool) {
				sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, 10)`)
				url = db.Config().ConnString()
			})
			x.Interleave(func(a *Actor) {
				ctx := a.Context()
				db := a.Pool(url)
				a.Step("update")
				tx, err := db.Begin(ctx)
				if err != nil {
					x.Errorf("begin: %v", err)
					return
				}
				defer func() { _ = tx.Rollback(context.Background()) }()
				if _, err := tx.Exec(ctx, `UPDATE lab_toy SET v = v - 1 WHERE id = 1`); err != nil {
					x.Error(a.Name, "update", err)
					return
				}
				a.Say("update", Accepted, "")
				a.Step("commit")
				if err := tx.Commit(ctx); err != nil {
					x.Error(a.Name, "commit", err)
				}
			})
			var v int
			db, err := pgx.Connect(context.Background(), url)
			if err != nil {
				x.Fatalf("connect: %v", err)
			}
			defer db.Close(context.Background())
			if err := db.QueryRow(context.Background(), `SELECT v FROM lab_toy WHERE id = 1`).Scan(&v); err != nil || v != 8 {
				x.Errorf("v = %d (%v), want 8: both updates applied", v, err)
			}
		},
	},
}

// A released actor that waits on a PostgreSQL lock is a blocked step: the
// scheduler sees it in pg_stat_activity (application_name lab:B) and
// moves on to the actor holding the lock; B is not offered again until it
// is granted the lock and reaches its next step. A schedule that chooses
// B while it is blocked does not exist: the exploration never runs it,
// and replaying it fails.
func TestALockWaitIsABlockedStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := RunSchedule(ctx, lockToy, toyEnv{t}, Guarded, []string{"A", "B", "A", "B"})
	if r.Verdict != Held || r.Schedule != "A,B,A,B" {
		t.Fatalf("A,B,A,B: verdict %s schedule %s failures %v", r.Verdict, r.Schedule, r.Failures)
	}
	if !slices.Equal(r.Blocked, []string{"B:update"}) {
		t.Fatalf("blocked steps %v, want [B:update]", r.Blocked)
	}
	third := r.Decisions[2]
	if len(third.Enabled) != 1 || third.Enabled[0].Actor != "A" || third.Blocked["B"] != "lab:A" {
		t.Fatalf("third decision %+v: want only A waiting, B blocked on lab:A", third)
	}
	var sawBlocked bool
	for _, s := range r.Timeline {
		sawBlocked = sawBlocked || (s.Actor == "B" && s.Outcome == "blocked" && strings.Contains(s.Note, "lab:A"))
	}
	if !sawBlocked {
		t.Fatalf("the timeline does not show B blocked on lab:A: %+v", r.Timeline)
	}

	bad := RunSchedule(ctx, lockToy, toyEnv{t}, Guarded, []string{"A", "B", "B", "A"})
	if bad.Verdict == Held || !strings.Contains(strings.Join(bad.Failures, "\n"), "not waiting at a step") {
		t.Fatalf("A,B,B,A chose B while it was blocked: verdict %s, failures %v", bad.Verdict, bad.Failures)
	}

	ex := ExploreExperiment(ctx, lockToy, toyEnv{t}, ExploreOptions{Variant: Guarded})
	var got []string
	for _, s := range ex.Schedules {
		got = append(got, s.Schedule)
	}
	slices.Sort(got)
	if want := []string{"A,A,B,B", "A,B,A,B", "B,A,B,A", "B,B,A,A"}; !slices.Equal(got, want) || ex.Verdict != Held {
		t.Fatalf("schedules %v (%s), want %v: the 6 orders less the two that choose a blocked actor", got, ex.Summary, want)
	}
}

// A stepping session (the console's "run this actor's next step") is the
// same scheduler with the reader's choices: each Next returns who waits,
// who is blocked on whom, the timeline and the invariants now; the last
// one the judged run.
func TestASessionStepsActorsByHand(t *testing.T) {
	t.Parallel()
	s, v, err := StartSession(context.Background(), lockToy, toyEnv{t}, Guarded)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waiting := func(v SessionView) string { return optNames(v.Waiting) }
	if waiting(v) != "A, B" || len(v.Invariants) == 0 {
		t.Fatalf("first view: waiting %s, invariants %v", waiting(v), v.Invariants)
	}
	if v, err = s.Next("A"); err != nil || waiting(v) != "A, B" {
		t.Fatalf("after A: waiting %s (%v)", waiting(v), err)
	}
	if v, err = s.Next("B"); err != nil || waiting(v) != "A" || v.Blocked["B"] != "lab:A" {
		t.Fatalf("after B: waiting %s, blocked %v (%v): B should wait on A's row lock", waiting(v), v.Blocked, err)
	}
	if _, err = s.Next("B"); err == nil || !strings.Contains(err.Error(), "not waiting") {
		t.Fatalf("releasing blocked B: %v", err)
	}
	if v, err = s.Next("A"); err != nil || waiting(v) != "B" || len(v.Blocked) != 0 {
		t.Fatalf("after A commits: waiting %s, blocked %v (%v)", waiting(v), v.Blocked, err)
	}
	v, err = s.Next("B")
	if err != nil || !v.Done || v.Result == nil || v.Result.Verdict != Held || v.Result.Schedule != "A,B,A,B" {
		t.Fatalf("last step: done %v result %+v (%v)", v.Done, v.Result, err)
	}
	if _, err := s.Next("A"); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("Next after the end: %v", err)
	}
}

// Two actors locking two rows in opposite orders deadlock under A,B,A,B:
// both are blocked, no actor is waiting, and PostgreSQL's deadlock
// detection ends one wait with 40P01. The schedule is reported as a
// deadlock; the run does not hang.
func TestADeadlockIsAnOutcomeNotAHang(t *testing.T) {
	t.Parallel()
	e := Experiment{
		ID: "toy/deadlock", Claim: "two actors, two rows, opposite orders", Invariants: []string{"toy"},
		ExpectedErrors: []string{"40P01"},
		Explore: &Explore{
			Claim:  "opposite lock orders",
			Actors: []ActorSpec{{Name: "A", Steps: Steps("lock 1", "lock 2")}, {Name: "B", Steps: Steps("lock 2", "lock 1")}},
			Run: func(x *X) {
				var url string
				toyWrite(x, func(_ context.Context, db *pgxpool.Pool) {
					sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, 10), (2, 10)`)
					url = db.Config().ConnString()
				})
				x.Interleave(func(a *Actor) {
					ctx := a.Context()
					tx, err := a.Pool(url).Begin(ctx)
					if err != nil {
						x.Errorf("begin: %v", err)
						return
					}
					defer func() { _ = tx.Rollback(context.Background()) }()
					for _, s := range Steps(map[string][]string{"A": {"lock 1", "lock 2"}, "B": {"lock 2", "lock 1"}}[a.Name]...) {
						a.Step(s.Label)
						if _, err := tx.Exec(ctx, `UPDATE lab_toy SET v = v - 1 WHERE id = $1`, s.Label[len(s.Label)-1:]); err != nil {
							x.Error(a.Name, s.Label, err)
							return
						}
					}
					if err := tx.Commit(ctx); err != nil {
						x.Error(a.Name, "commit", err)
					}
				})
			},
		},
	}
	r := RunSchedule(context.Background(), e, toyEnv{t}, Guarded, []string{"A", "B", "A", "B"})
	if o := outcomeOf(r, 0); o.Outcome != "deadlock" || len(r.Blocked) != 2 {
		t.Fatalf("A,B,A,B: outcome %q (verdict %s), blocked %v, failures %v", o.Outcome, r.Verdict, r.Blocked, r.Failures)
	}
}
