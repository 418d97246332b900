package lab_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/program"
)

// scheduleEnv runs each schedule of an exploration on a database cloned
// from the test's migrated template, and its app for that schedule only
// (stopped when the schedule ends): e2etest.Env needs a *testing.T, and a
// schedule runs under the lab's own runner, as under `lab explore`.
type scheduleEnv struct{ t *testing.T }

func (e scheduleEnv) Database(lab.T) string { return pgtest.URL(e.t) }
func (e scheduleEnv) Start(t lab.T, o lab.Options) *lab.App {
	db := o.DBURL
	if db == "" {
		db = pgtest.URL(e.t)
	}
	return labenv.Serve(t, program.Lab(), db, o, slog.New(slog.NewTextHandler(io.Discard, nil))).App
}
func (e scheduleEnv) Binary(lab.T) string { return e2etest.Binary(e.t) }
func (e scheduleEnv) ChildEnv(db string, extra ...string) []string {
	return e2etest.ChildEnv(db, extra...)
}
func (e scheduleEnv) Dedicated(lab.T) *pgserver.Server { return pgtest.Dedicated(e.t) }
func (e scheduleEnv) DatabaseOn(_ lab.T, s *pgserver.Server) string {
	return pgtest.URLOn(e.t, s)
}
func (e scheduleEnv) Invariants() *invariant.Registry { return program.Invariants() }

func explorable(t *testing.T, id string) lab.Experiment {
	t.Helper()
	e, ok := lab.Find(program.Experiments(), id)
	if !ok || e.Explore == nil {
		t.Fatalf("%s is not an explorable experiment", id)
	}
	return e
}

// The naive exploration of points/concurrent-debits, shared by the tests
// that read it (each schedule costs a database and an app).
var (
	pointsNaiveOnce sync.Once
	pointsNaive     lab.Exploration
)

func exploreNaivePoints(t *testing.T) lab.Exploration {
	pointsNaiveOnce.Do(func() {
		pointsNaive = lab.ExploreExperiment(context.Background(), explorable(t, "points/concurrent-debits"),
			scheduleEnv{t}, lab.ExploreOptions{Variant: lab.Naive, Parallel: 2})
	})
	return pointsNaive
}

// Guarded, every schedule of two read → debit → commit transactions
// against room for one holds (the guarded UPDATE re-checks the committed
// balance, also when it waited for the other's lock); naive, the schedules
// where both read 40 before either commits overdraw and are caught, and a
// serial one is not: the naive code breaks by its interleaving only.
func TestPointsDebitsUnderEverySchedule(t *testing.T) {
	e := explorable(t, "points/concurrent-debits")
	g := lab.ExploreExperiment(context.Background(), e, scheduleEnv{t}, lab.ExploreOptions{Variant: lab.Guarded, Parallel: 2})
	if g.Verdict != lab.Held || g.Exit != 0 || g.Count < 10 || g.Breaking != 0 || g.Mode != "exhaustive" {
		t.Fatalf("guarded: %s (verdict %s, exit %d, mode %s): %+v", g.Summary, g.Verdict, g.Exit, g.Mode, g.Schedules)
	}
	var blocked int
	for _, s := range g.Schedules {
		if len(s.Blocked) > 0 {
			blocked++
		}
	}
	if blocked == 0 {
		t.Errorf("guarded: no schedule had a debit wait on the other's lock: %+v", g.Schedules)
	}

	n := exploreNaivePoints(t)
	if n.Verdict != lab.Caught || n.Exit != 1 || n.Breaking == 0 || n.Breaking == n.Count {
		t.Fatalf("naive: %s (verdict %s, exit %d): want caught in some schedules but not all: %+v", n.Summary, n.Verdict, n.Exit, n.Schedules)
	}
	outcome := map[string]lab.Verdict{}
	for _, s := range n.Schedules {
		outcome[s.Schedule] = s.Verdict
		if s.Verdict == lab.Caught && !slices.Contains(s.Violated, "PTS-I1") {
			t.Errorf("naive %s caught by %v, want PTS-I1", s.Schedule, s.Violated)
		}
	}
	for _, serial := range []string{"A,A,A,B,B,B", "B,B,B,A,A,A"} {
		if outcome[serial] != lab.NotCaught {
			t.Errorf("naive serial schedule %s: %q, want not caught (it was run: %v)", serial, outcome[serial], len(outcome))
		}
	}
	if outcome["A,B,A,B,A,B"] != lab.Caught {
		t.Errorf("naive A,B,A,B,A,B (both read 40, then both debit): %q, want caught", outcome["A,B,A,B,A,B"])
	}
}

// The first schedule the naive exploration caught, run again through the
// path `lab run ID --naive --schedule …` takes (lab.RunSchedule), makes the
// same choices and reaches the same verdict with the same invariant
// reporting rows.
func TestAScheduleReplaysToTheSameVerdict(t *testing.T) {
	n := exploreNaivePoints(t)
	if n.First == nil {
		t.Fatalf("the naive exploration caught no schedule: %s", n.Summary)
	}
	want := n.First
	if n.Replay != "fencelab lab run points/concurrent-debits --naive --schedule "+want.Schedule {
		t.Errorf("replay command %q", n.Replay)
	}
	r := lab.RunSchedule(context.Background(), explorable(t, "points/concurrent-debits"), scheduleEnv{t}, lab.Naive,
		lab.ParseSchedule(want.Schedule))
	if r.Verdict != want.Verdict || r.Exit != want.Exit || r.Schedule != want.Schedule || len(r.Failures) > 0 {
		t.Fatalf("replay of %s: verdict %s exit %d schedule %s failures %v; the exploration had %s exit %d",
			want.Schedule, r.Verdict, r.Exit, r.Schedule, r.Failures, want.Verdict, want.Exit)
	}
	if !slices.Equal(violated(r), violated(*want)) || !slices.Equal(r.Blocked, want.Blocked) {
		t.Fatalf("replay of %s: violated %v blocked %v; the exploration: violated %v blocked %v",
			want.Schedule, violated(r), r.Blocked, violated(*want), want.Blocked)
	}
}

func violated(r lab.Result) []string {
	var out []string
	for _, v := range r.Invariants {
		if !v.Holds && !v.Schema {
			out = append(out, v.ID)
		}
	}
	return out
}

// lease/paused-holder's breaking schedule, spelled out: A acquires and
// stops before its write, the clock expires A's lease, B acquires and
// writes, A writes. Naive, the stale write lands and LOCK-I2 catches it;
// guarded, the same schedule ends with A's write refused.
func TestThePausedHoldersStaleWriteUnderOneSchedule(t *testing.T) {
	e := explorable(t, "lease/paused-holder")
	schedule := lab.ParseSchedule("A,clock,B,B,A")
	n := lab.RunSchedule(context.Background(), e, scheduleEnv{t}, lab.Naive, schedule)
	if n.Verdict != lab.Caught || !slices.Contains(violated(n), "LOCK-I2") {
		t.Fatalf("naive A,clock,B,B,A: %s, violated %v, failures %v", n.Verdict, violated(n), n.Failures)
	}
	g := lab.RunSchedule(context.Background(), e, scheduleEnv{t}, lab.Guarded, schedule)
	if g.Verdict != lab.Held || g.Schedule != "A,clock,B,B,A" {
		t.Fatalf("guarded A,clock,B,B,A: %s (%s), failures %v", g.Verdict, g.Schedule, g.Failures)
	}
	last := g.Timeline[len(g.Timeline)-2] // before the re-read
	if last.Actor != "A" || last.Outcome != lab.Refused {
		t.Fatalf("guarded: A's late write should be refused; the timeline ends %+v", g.Timeline[len(g.Timeline)-3:])
	}
}

// Four more chapters under the scheduler, cheaply (each exhaustive
// exploration runs under `fencelab docs --explore`, recorded in
// docs/explored.json): the guarded version holds under a schedule where
// the actors race; the naive version is caught under a schedule where its
// race happens and not under a serial one — each run as `lab run ID
// [--naive] --schedule …` runs it.
func TestNewChaptersHoldGuardedAndBreakNaiveByTheirSchedule(t *testing.T) {
	for _, c := range []struct {
		id, guarded, breaking, serial, violates string
	}{
		{"relations/block-revokes-on-commit", "A,B,A,B", "A,B,B,A,A", "A,A,A,B,B", "REL-I2"},
		{"likes/recompute-beside-increments", "admin,counter,admin,user", "admin,admin,counter,user", "user,counter,admin,admin", "LIKE-I3"},
		{"upload/processing-lease-taken-over", "clock,A,A,B,B", "clock,A,A,B,B", "A,A,clock,B", "UP-F3"},
		{"claim/two-claimers", "A,B,A,B,A", "A,B,A,B,A,B", "A,A,A,B,B", "CLAIM-I3"},
	} {
		t.Run(c.id, func(t *testing.T) {
			e := explorable(t, c.id)
			g := lab.RunSchedule(context.Background(), e, scheduleEnv{t}, lab.Guarded, lab.ParseSchedule(c.guarded))
			if g.Verdict != lab.Held || g.Exit != 0 || g.Schedule != c.guarded {
				t.Errorf("guarded %s: %s, schedule %s, failures %v: want held", c.guarded, g.Verdict, g.Schedule, g.Failures)
			}
			r := lab.RunSchedule(context.Background(), e, scheduleEnv{t}, lab.Naive, lab.ParseSchedule(c.breaking))
			if r.Verdict != lab.Caught || r.Schedule != c.breaking {
				t.Errorf("naive %s: %s, schedule %s, failures %v: want caught", c.breaking, r.Verdict, r.Schedule, r.Failures)
			}
			var violated []string
			for _, v := range r.Invariants {
				if !v.Holds && !v.Schema {
					violated = append(violated, v.ID)
				}
			}
			if !slices.Contains(violated, c.violates) {
				t.Errorf("naive %s violated %v, want %s among them", c.breaking, violated, c.violates)
			}
			s := lab.RunSchedule(context.Background(), e, scheduleEnv{t}, lab.Naive, lab.ParseSchedule(c.serial))
			if s.Verdict != lab.NotCaught || len(s.Failures) > 0 || s.Schedule != c.serial {
				t.Errorf("naive serial %s: %s, schedule %s, failures %v: want not caught", c.serial, s.Verdict, s.Schedule, s.Failures)
			}
		})
	}
}
