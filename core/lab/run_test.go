package lab

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The toy chapter: one table whose value must not be negative (TOY-I1, a
// data invariant) under a CHECK (TOY-S1, its schema invariant).
var toyInvariants = invariant.MustRegistry([]invariant.Invariant{
	{ID: "TOY-I1", Module: "toy", Statement: "no value is negative",
		SQL: `SELECT id, v FROM lab_toy WHERE v < 0`},
	{ID: "TOY-S1", Module: "toy", Statement: "the CHECK (v >= 0) is in place", Schema: true,
		SQL: `SELECT 'lab_toy_v_non_negative missing' AS problem
		       WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'lab_toy_v_non_negative')`},
})

// toyEnv gives toy experiments scratch databases of the outer test; they
// need nothing else.
type toyEnv struct{ t *testing.T }

func (e toyEnv) Database(T) string { return pgtest.URL(e.t) }
func (e toyEnv) Start(t T, _ Options) *App {
	t.Fatalf("toy env: no app")
	return nil
}
func (e toyEnv) Binary(t T) string {
	t.Fatalf("toy env: no binary")
	return ""
}
func (e toyEnv) ChildEnv(string, ...string) []string { return nil }
func (e toyEnv) Dedicated(t T) *pgserver.Server {
	t.Fatalf("toy env: no dedicated server")
	return nil
}
func (e toyEnv) DatabaseOn(t T, _ *pgserver.Server) string {
	t.Fatalf("toy env: no dedicated server")
	return ""
}
func (e toyEnv) Invariants() *invariant.Registry { return toyInvariants }

// toyWrite opens the experiment's database, makes the guarded table and
// lets fn write to it.
func toyWrite(x *X, fn func(ctx context.Context, db *pgxpool.Pool)) {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, x.Database())
	if err != nil {
		x.Fatalf("connect: %v", err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE lab_toy (id int PRIMARY KEY, v int NOT NULL,
	                             CONSTRAINT lab_toy_v_non_negative CHECK (v >= 0))`); err != nil {
		x.Fatalf("create: %v", err)
	}
	fn(ctx, db)
}

func sqlExec(x *X, db *pgxpool.Pool, sql string) {
	if _, err := db.Exec(context.Background(), sql); err != nil {
		x.Fatalf("%s: %v", sql, err)
	}
}

// toy is the model experiment: the guarded write is refused by the CHECK;
// the naive version drops it and two "actors" write −1 (the race), the
// control drops it and one actor writes a correct 1.
var toy = Experiment{
	ID: "toy/negative", Claim: "a value never goes negative",
	Invariants: []string{"toy"}, Catches: []string{"TOY-I1"},
	Naive: "no CHECK", Control: "no CHECK, one actor",
	Run: func(x *X) {
		toyWrite(x, func(ctx context.Context, db *pgxpool.Pool) {
			sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, 1)`)
			if !x.Naive {
				x.Step(Step{Actor: "a", Action: "write −1", Outcome: Refused})
				return
			}
			sqlExec(x, db, `ALTER TABLE lab_toy DROP CONSTRAINT lab_toy_v_non_negative`)
			if x.Control {
				x.Step(Step{Actor: "a", Action: "write 1", Outcome: Accepted})
				return
			}
			sqlExec(x, db, `UPDATE lab_toy SET v = -1`)
			x.Step(Step{Actor: "a", Action: "write −1", Outcome: Violates})
		})
	},
}

func run(t *testing.T, e Experiment, v Variant) Result {
	t.Helper()
	return RunVariant(context.Background(), e, toyEnv{t}, v)
}

func view(t *testing.T, r Result, id string) InvariantView {
	t.Helper()
	for _, v := range r.Invariants {
		if v.ID == id {
			return v
		}
	}
	t.Fatalf("%s was not checked: %+v", id, r.Invariants)
	return InvariantView{}
}

func TestAGuardedRunThatHoldsExitsZero(t *testing.T) {
	t.Parallel()
	r := run(t, toy, Guarded)
	if r.Verdict != Held || r.Exit != 0 || !r.Holds || r.Caught {
		t.Fatalf("verdict %q exit %d holds %v caught %v; failures %v", r.Verdict, r.Exit, r.Holds, r.Caught, r.Failures)
	}
	if len(r.Timeline) != 1 || r.Variant != "guarded" {
		t.Fatalf("timeline %v, variant %q", r.Timeline, r.Variant)
	}
}

func TestANaiveRunCaughtByItsDataInvariantExitsOne(t *testing.T) {
	t.Parallel()
	r := run(t, toy, Naive)
	if r.Verdict != Caught || r.Exit != 1 || !r.Caught || r.Holds {
		t.Fatalf("verdict %q exit %d caught %v holds %v; failures %v", r.Verdict, r.Exit, r.Caught, r.Holds, r.Failures)
	}
	if v := view(t, r, "TOY-I1"); v.Holds || len(v.Rows) != 1 {
		t.Fatalf("TOY-I1 should report the one negative row: %+v", v)
	}
	if v := view(t, r, "TOY-S1"); v.Holds || !v.Schema {
		t.Fatalf("TOY-S1 should report the dropped CHECK as a schema finding: %+v", v)
	}
}

// The control runs the naive code (the CHECK is dropped) without the
// race: the schema invariant reports the missing guard, and the run holds
// all the same, because every data invariant holds.
func TestAControlHoldsThoughItsSchemaGuardIsGone(t *testing.T) {
	t.Parallel()
	r := run(t, toy, Control)
	if r.Verdict != Held || r.Exit != 0 || !r.Holds || !r.Control || !r.Naive {
		t.Fatalf("verdict %q exit %d holds %v control %v naive %v; failures %v", r.Verdict, r.Exit, r.Holds, r.Control, r.Naive, r.Failures)
	}
	if v := view(t, r, "TOY-S1"); v.Holds {
		t.Fatalf("the control drops the CHECK, TOY-S1 should say so: %+v", v)
	}
	if !strings.Contains(r.Message(), "the control held") {
		t.Fatalf("message %q", r.Message())
	}
}

// A guarded run whose data breaks an invariant is broken: exit 1 and a
// message that says the guarantee failed — and the same for a control.
func TestABrokenGuardedRunOrControlExitsOne(t *testing.T) {
	t.Parallel()
	broken := toy
	broken.Run = func(x *X) {
		toyWrite(x, func(ctx context.Context, db *pgxpool.Pool) {
			sqlExec(x, db, `ALTER TABLE lab_toy DROP CONSTRAINT lab_toy_v_non_negative`)
			sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, -5)`)
		})
	}
	for _, v := range []Variant{Guarded, Control} {
		r := run(t, broken, v)
		if r.Verdict != Broke || r.Exit != 1 || r.Holds {
			t.Fatalf("%s: verdict %q exit %d holds %v", v, r.Verdict, r.Exit, r.Holds)
		}
		if !strings.Contains(r.Message(), v.String()) {
			t.Fatalf("%s: the message should say which run broke: %q", v, r.Message())
		}
	}
	// A guarded run breaks on its schema invariant too: only naive code
	// may run without the guard.
	r := run(t, broken, Guarded)
	if v := view(t, r, "TOY-S1"); v.Holds {
		t.Fatalf("TOY-S1 should report the dropped CHECK: %+v", v)
	}
}

// A naive run that no data invariant catches is a broken experiment
// (exit 3) — and so is one that only a schema invariant "catches".
func TestANaiveRunThatIsNotCaughtIsABrokenExperiment(t *testing.T) {
	t.Parallel()
	harmless := toy
	harmless.Run = toy.Run
	harmless.Catches = []string{"TOY-I1"}
	harmless.Run = func(x *X) {
		toyWrite(x, func(ctx context.Context, db *pgxpool.Pool) {
			sqlExec(x, db, `ALTER TABLE lab_toy DROP CONSTRAINT lab_toy_v_non_negative`)
			sqlExec(x, db, `INSERT INTO lab_toy VALUES (1, 1)`)
		})
	}
	schemaOnly := harmless
	schemaOnly.Catches = []string{"TOY-S1"}
	for _, e := range []Experiment{harmless, schemaOnly} {
		r := run(t, e, Naive)
		if r.Verdict != NotCaught || r.Exit != 3 || r.Caught {
			t.Fatalf("catches %v: verdict %q exit %d caught %v", e.Catches, r.Verdict, r.Exit, r.Caught)
		}
		if !strings.Contains(r.Message(), "experiment is broken") {
			t.Fatalf("message %q", r.Message())
		}
	}
}

// An actor's error that the experiment did not declare fails the run,
// whichever version ran; a declared one is an outcome like any other.
func TestAnUnexpectedActorErrorFailsTheRun(t *testing.T) {
	t.Parallel()
	failing := toy
	failing.Run = func(x *X) {
		toy.Run(x)
		x.Error("client-1", "debit 30", errors.New("ERROR: deadlock detected (SQLSTATE 40P01)"))
	}
	r := run(t, failing, Naive)
	if r.Verdict != NotCaught || r.Exit != 3 || len(r.Failures) != 1 {
		t.Fatalf("a naive run with an unexpected error is not a catch: verdict %q exit %d failures %v", r.Verdict, r.Exit, r.Failures)
	}
	if last := r.Timeline[len(r.Timeline)-1]; last.Outcome != "error" || last.Actor != "client-1" {
		t.Fatalf("the error should be on the timeline: %+v", last)
	}
	if r = run(t, failing, Guarded); r.Verdict != Broke || r.Exit != 1 {
		t.Fatalf("a guarded run with an unexpected error: verdict %q exit %d", r.Verdict, r.Exit)
	}

	declared := failing
	declared.ExpectedErrors = []string{"40P01"}
	if r = run(t, declared, Naive); r.Verdict != Caught || len(r.Failures) != 0 {
		t.Fatalf("a declared error is an outcome: verdict %q failures %v", r.Verdict, r.Failures)
	}
	if last := r.Timeline[len(r.Timeline)-1]; last.Outcome != "expected error" {
		t.Fatalf("the declared error should be on the timeline as expected: %+v", last)
	}
	if r = run(t, declared, Guarded); r.Verdict != Held {
		t.Fatalf("guarded with a declared error: verdict %q failures %v", r.Verdict, r.Failures)
	}
}

// A run still going when its context ends fails with a timeout, its
// cleanups run, and the verdict is not a pass: an experiment that waits on
// its context returns at once; one that ignores it is abandoned after the
// grace period.
func TestARunThatOutlivesItsContextTimesOut(t *testing.T) {
	grace := cleanupGrace
	cleanupGrace = 100 * time.Millisecond
	t.Cleanup(func() { cleanupGrace = grace })

	stuck := make(chan struct{})
	defer close(stuck)
	for name, wait := range map[string]func(x *X){
		"waits on its context": func(x *X) { <-x.Context().Done() },
		"ignores its context":  func(x *X) { <-stuck },
	} {
		cleaned := make(chan struct{})
		slow := toy
		slow.Run = func(x *X) {
			x.Cleanup(func() { close(cleaned) })
			x.Step(Step{Actor: "a", Action: "wait"})
			wait(x)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		r := RunVariant(ctx, slow, toyEnv{t}, Guarded)
		cancel()
		select {
		case <-cleaned:
		default:
			t.Fatalf("%s: the cleanups did not run", name)
		}
		if r.Verdict != Broke || r.Exit != 1 || !strings.Contains(strings.Join(r.Failures, "\n"), "did not finish") {
			t.Fatalf("%s: verdict %q exit %d failures %v", name, r.Verdict, r.Exit, r.Failures)
		}
		if len(r.Timeline) != 1 {
			t.Fatalf("%s: the timeline so far should be kept: %v", name, r.Timeline)
		}
	}
}

func TestVerdictExitCodes(t *testing.T) {
	t.Parallel()
	for v, want := range map[Verdict]int{Held: 0, Caught: 1, Broke: 1, NotCaught: 3} {
		if got := v.ExitCode(); got != want {
			t.Errorf("%q exits %d, want %d", v, got, want)
		}
	}
}
