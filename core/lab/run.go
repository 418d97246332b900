package lab

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/invariant"
)

// Result is what one run showed: its timeline, the book's figure line and
// each invariant's outcome. The console draws it; `lab run --json` prints it.
type Result struct {
	ID         string          `json:"id"`
	Chapter    string          `json:"chapter"`
	Claim      string          `json:"claim"`
	Variant    string          `json:"variant"` // guarded, naive or control
	Naive      bool            `json:"naive"`   // the naive code ran (a naive run or its control)
	NaiveHow   string          `json:"naive_how,omitempty"`
	Catches    []string        `json:"catches,omitempty"`
	Control    bool            `json:"control"`
	ControlHow string          `json:"control_how,omitempty"`
	Started    time.Time       `json:"started"` // the first step, database clock
	Timeline   []Step          `json:"timeline"`
	Figure     map[string]any  `json:"figure,omitempty"`
	Invariants []InvariantView `json:"invariants"`
	Failures   []string        `json:"failures,omitempty"` // the experiment's own assertions, unexpected errors, a timeout
	Log        []string        `json:"log,omitempty"`
	// Holds: the claim held — no assertion failed and every invariant held
	// (in a naive run or a control, every data invariant: the naive code
	// may drop a guard from the schema, and its schema invariant says so).
	Holds bool `json:"holds"`
	// Caught: a naive run was caught by one of the experiment's Catches.
	Caught bool `json:"caught"`
	// Verdict is the run's one word, and Exit the code `lab run` exits
	// with (Verdict says which).
	Verdict Verdict `json:"verdict"`
	Exit    int     `json:"exit"`
	// Schedule is a scheduled run's sequence of choices ("A,B,B,A"), its
	// Decisions each choice with the actors waiting and blocked at it, and
	// Blocked the steps seen waiting on a lock ("B:debit").
	Schedule  string     `json:"schedule,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	Blocked   []string   `json:"blocked,omitempty"`
}

// Verdict is what a run proved.
type Verdict string

const (
	// Held: a guarded run or a control held every invariant (exit 0).
	Held Verdict = "holds"
	// Caught: a naive run broke an invariant it Catches, as predicted (exit 1).
	Caught Verdict = "caught"
	// Broke: a guarded run or a control broke an invariant or an
	// assertion: the guarantee (or the control's premise) failed (exit 1).
	Broke Verdict = "broke"
	// NotCaught: a naive run that none of its Catches caught, or that
	// failed before it could be judged: the experiment is broken (exit 3).
	NotCaught Verdict = "not caught"
)

// ExitCode is the exit status `fencelab lab run` gives a verdict.
func (v Verdict) ExitCode() int {
	switch v {
	case Held:
		return 0
	case NotCaught:
		return 3
	}
	return 1
}

// Message says what the verdict means for the reader.
func (r Result) Message() string {
	switch r.Verdict {
	case Held:
		if r.Control {
			return "HOLDS: the control held every invariant — the naive code alone does not break it: the race or the fault does"
		}
		return "HOLDS: the claim held and every invariant held"
	case Caught:
		return "CAUGHT: the naive version broke the invariant, as the book says it would"
	case NotCaught:
		return "NOT CAUGHT: the naive run was not caught by " + strings.Join(r.Catches, ", ") + ": the experiment is broken"
	}
	if r.Control {
		return "BROKE: the control broke an invariant or an assertion — the naive version's catch does not depend on the race: the experiment is broken"
	}
	return "BROKE: the guarded run broke an invariant or an assertion — the guarantee did not hold"
}

// InvariantView is one invariant's outcome, ready to print or draw.
type InvariantView struct {
	ID        string `json:"id"`
	Statement string `json:"statement"`
	SQL       string `json:"sql,omitempty"`
	// Schema marks a schema invariant (a guard present in the catalog);
	// the others report rows of data.
	Schema  bool     `json:"schema,omitempty"`
	Holds   bool     `json:"holds"`
	Columns []string `json:"columns,omitempty"`
	Rows    [][]any  `json:"rows,omitempty"`
	More    bool     `json:"more,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Test runs e under go test: the guarded version must hold its claim and
// every invariant; the naive version (a subtest) must be caught and its
// control (a subtest) must hold. Each step is logged, so its e2e test
// (`go test -v -run '^TestExperiments$/^TestX$'`) tells the story.
func Test(t *testing.T, e Experiment, env Env) {
	t.Helper()
	x := newX(t, env, e, Guarded)
	t.Logf("%s — %s", e.ID, e.Claim)
	e.Run(x)
	x.endOverlap(e)
	if t.Failed() {
		return
	}
	for _, v := range x.check(e) {
		if !v.Holds {
			t.Errorf("%s", formatInvariant(v))
		}
	}
	x.logFigure()
	var naive, control []InvariantView
	if e.Naive != "" {
		t.Run("naive", func(t *testing.T) { naive = TestNaive(t, e, env) })
	}
	if e.Control != "" {
		t.Run("control", func(t *testing.T) { control = TestControl(t, e, env) })
	}
	if naive != nil && control != nil {
		for _, row := range SharedCatches(e, naive, control) {
			t.Errorf("the control produces the row that catches the naive run: %s", row)
		}
	}
}

// SharedCatches returns the rows of e.Catches that caught the naive run and
// that its control produced too. A naive version proves its guard only if
// it breaks because of the race or the fault: a row the naive code writes
// whatever the timing (the control has it as well) proves nothing, so any
// row returned here is a broken experiment. Schema findings are never
// compared: they are not data the timeline produced.
func SharedCatches(e Experiment, naive, control []InvariantView) []string {
	var shared []string
	for _, id := range e.Catches {
		seen := map[string]bool{}
		for _, row := range dataRows(control, id) {
			seen[row] = true
		}
		for _, row := range dataRows(naive, id) {
			if seen[row] {
				shared = append(shared, id+": "+row)
			}
		}
	}
	return shared
}

// dataRows renders each data row the invariant id reported.
func dataRows(views []InvariantView, id string) []string {
	var out []string
	for _, v := range views {
		if v.ID != id || v.Schema {
			continue
		}
		for _, row := range v.Rows {
			out = append(out, fmt.Sprint(row...))
		}
	}
	return out
}

// TestNaive runs e's naive version and asserts one of e.Catches catches it:
// the proof that the invariant can fail. It returns the run's invariants.
func TestNaive(t *testing.T, e Experiment, env Env) []InvariantView {
	t.Helper()
	views := testVariant(t, e, env, Naive, e.Naive, "naive version")
	if views == nil {
		return nil
	}
	for _, v := range views {
		if !v.Holds {
			t.Logf("caught, as it should be:\n%s", formatInvariant(v))
		}
	}
	if !caught(e, views) {
		t.Errorf("the naive version of %s was not caught by %v", e.ID, e.Catches)
	}
	return views
}

// TestControl runs e's control (the naive code without its race or
// fault) and asserts every data invariant holds. It returns the run's
// invariants.
func TestControl(t *testing.T, e Experiment, env Env) []InvariantView {
	t.Helper()
	views := testVariant(t, e, env, Control, e.Control, "control")
	if views == nil {
		return nil
	}
	for _, v := range views {
		switch {
		case v.Holds:
		case v.Schema && v.Error == "":
			t.Logf("the naive schema, as the naive version sets it up:\n%s", formatInvariant(v))
		default:
			t.Errorf("the control of %s broke:\n%s", e.ID, formatInvariant(v))
		}
	}
	return views
}

// testVariant runs e's naive version or its control (named name, what the
// experiment calls it; a variant e lacks is fatal) and returns the run's
// invariants, or nil when the run itself failed.
func testVariant(t *testing.T, e Experiment, env Env, v Variant, name, what string) []InvariantView {
	t.Helper()
	if name == "" {
		t.Fatalf("%s has no %s", e.ID, what)
	}
	x := newX(t, env, e, v)
	t.Logf("%s (%s: %s)", e.ID, strings.Fields(what)[0], name)
	e.Run(x)
	if t.Failed() {
		return nil
	}
	return x.check(e)
}

func newX(t T, env Env, e Experiment, v Variant) *X {
	return &X{T: t, Env: env, Naive: v != Guarded, Control: v == Control, expected: e.ExpectedErrors,
		start: time.Now(), echo: true,
		// Only the guarded run must observe its overlap: a control takes
		// the race out on purpose, and a naive run is judged by its catch.
		overlap: e.Overlap && v == Guarded}
}

// Run runs e outside go test (the CLI, the console): failures are recorded,
// not fatal, and every resource the run made is removed before it returns.
func Run(ctx context.Context, e Experiment, env Env, naive bool) Result {
	if naive {
		return RunVariant(ctx, e, env, Naive)
	}
	return RunVariant(ctx, e, env, Guarded)
}

// cleanupGrace is how long a run that outlived its context is given to
// notice the cancellation before its cleanups run anyway.
var cleanupGrace = 10 * time.Second

// RunVariant is Run for any variant. A run still going when ctx ends
// (the CLI's --timeout) fails with a timeout.
func RunVariant(ctx context.Context, e Experiment, env Env, v Variant) Result {
	return runVariant(ctx, e, env, v, nil)
}

// runVariant is RunVariant, under a scheduler when pol is set: then the
// experiment's Explore body runs instead of its Run (lab explore, lab run
// --schedule: both come through here, so a replayed schedule runs exactly
// as it ran in the exploration).
func runVariant(ctx context.Context, e Experiment, env Env, v Variant, pol policy) Result {
	rt := newRunT(ctx, e.ID)
	x := newX(rt, env, e, v)
	x.echo = false
	body := e.Run
	if pol != nil {
		x.sched = newScheduler(x, e.Explore, pol)
		if b, ok := pol.(interface{ bind(*X) }); ok {
			b.bind(x) // a stepping session reads the run's timeline and invariants
		}
		x.overlap = false // a schedule orders the actors; it is judged by its invariants
		body = e.Explore.Run
	}
	res := Result{ID: e.ID, Chapter: chapterOf(e.ID), Claim: e.Claim, Variant: v.String(),
		Naive: v != Guarded, Control: v == Control}
	if res.Naive {
		res.NaiveHow, res.Catches = e.Naive, e.Catches
	}
	if res.Control {
		res.ControlHow = e.Control
	}
	if pol != nil {
		res.Claim = e.Explore.Claim
	}
	done := make(chan []InvariantView, 1)
	go func() {
		var views []InvariantView
		defer func() { done <- views }()
		defer func() {
			if p := recover(); p != nil {
				rt.Errorf("panic: %v", p)
			}
		}()
		switch {
		case v == Naive && e.Naive == "":
			rt.Fatalf("%s has no naive version", e.ID)
		case v == Control && e.Control == "":
			rt.Fatalf("%s has no control", e.ID)
		}
		body(x)
		x.endOverlap(e)
		if !rt.Failed() {
			views = x.check(e)
		}
	}()
	select {
	case res.Invariants = <-done:
	case <-ctx.Done():
		rt.Errorf("lab: %s did not finish: %v", e.ID, context.Cause(ctx))
		rt.cancel() // the experiment's context: a well-behaved wait returns now
		select {
		case <-done: // its invariants were not checked in time: they are not reported
		case <-time.After(cleanupGrace):
		}
	}
	rt.cleanup()
	res.Started = x.t0
	res.Timeline = x.Steps()
	res.Figure = x.figure
	res.Failures, res.Log = rt.result()
	if x.sched != nil {
		x.sched.mu.Lock()
		res.Decisions = append([]Decision(nil), x.sched.decisions...)
		res.Blocked = append([]string(nil), x.sched.blockedAt...)
		x.sched.mu.Unlock()
		res.Schedule = strings.Join(x.sched.schedule(), ",")
	}
	judge(&res, e)
	return res
}

// judge sets Holds, Caught, Verdict and Exit from what the run recorded.
func judge(res *Result, e Experiment) {
	res.Holds = len(res.Failures) == 0 && len(res.Invariants) > 0
	for _, v := range res.Invariants {
		if res.Naive && v.Schema && v.Error == "" {
			continue // the naive schema, set up on purpose; the data decides
		}
		res.Holds = res.Holds && v.Holds
	}
	res.Caught = res.Variant == Naive.String() && len(res.Failures) == 0 && caught(e, res.Invariants)
	switch {
	case res.Variant == Naive.String() && res.Caught:
		res.Verdict = Caught
	case res.Variant == Naive.String():
		res.Verdict = NotCaught
	case res.Holds:
		res.Verdict = Held
	default:
		res.Verdict = Broke
	}
	res.Exit = res.Verdict.ExitCode()
}

// caught: a data invariant among e.Catches reported rows. A schema
// invariant never catches a run: a missing guard is not a broken balance.
func caught(e Experiment, views []InvariantView) bool {
	for _, v := range views {
		for _, c := range e.Catches {
			if !v.Holds && !v.Schema && v.Error == "" && v.ID == c {
				return true
			}
		}
	}
	return false
}

// check runs the experiment's invariants on its database.
func (x *X) check(e Experiment) []InvariantView {
	x.Helper()
	x.mu.Lock()
	db := x.db
	x.mu.Unlock()
	if db == "" {
		x.Fatalf("%s opened no database to check its invariants on", e.ID)
	}
	if len(e.Invariants) == 0 {
		x.Fatalf("%s names no invariants: an experiment ends with its module's invariants", e.ID)
	}
	reg := x.Env.Invariants()
	if len(reg.Select(e.Invariants...)) == 0 {
		x.Fatalf("%s: no invariants registered for %v", e.ID, e.Invariants)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		x.Fatalf("lab: connect to check invariants: %v", err)
	}
	defer pool.Close()
	return invariantViews(reg.Run(ctx, pool, e.Invariants...))
}

// invariantViews are results as a run reports them (the end-of-run check
// and the mid-run look share this one conversion).
func invariantViews(results []invariant.Result) []InvariantView {
	var out []InvariantView
	for _, r := range results {
		v := InvariantView{ID: r.ID, Statement: r.Statement, SQL: r.SQL, Schema: r.Schema, Holds: r.Holds(),
			Columns: r.Columns, Rows: r.Rows, More: r.More}
		if r.Err != nil {
			v.Error = r.Err.Error()
		}
		out = append(out, v)
	}
	return out
}

func (x *X) logFigure() {
	if len(x.figure) > 0 {
		x.Logf("figure: %s", FigureLine(x.figure))
	}
}

// FigureLine renders the figure as one JSON object with sorted keys.
func FigureLine(f map[string]any) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := fmt.Sprint(f[k])
		switch f[k].(type) {
		case string:
			v = fmt.Sprintf("%q", f[k])
		case []int64, []int:
			v = strings.ReplaceAll(fmt.Sprint(f[k]), " ", ",")
		}
		parts[i] = fmt.Sprintf("%q:%s", k, v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func formatInvariant(v InvariantView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", v.ID, v.Statement)
	switch {
	case v.Error != "":
		fmt.Fprintf(&b, "\n  check failed: %s", v.Error)
	case !v.Holds:
		fmt.Fprintf(&b, "\n  %s", strings.Join(v.Columns, " | "))
		for _, row := range v.Rows {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = fmt.Sprint(c)
			}
			fmt.Fprintf(&b, "\n  %s", strings.Join(cells, " | "))
		}
		if v.More {
			fmt.Fprintf(&b, "\n  … more rows")
		}
	}
	return b.String()
}

// FormatInvariant is formatInvariant for the CLI and the console.
func FormatInvariant(v InvariantView) string { return formatInvariant(v) }

func chapterOf(id string) string {
	slug, _, _ := strings.Cut(id, "/")
	return slug
}

// runT is the CLI's stand-in for *testing.T: a failure ends the
// experiment's goroutine (as FailNow does in a test) and is recorded.
type runT struct {
	name     string
	ctx      context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	failed   bool
	failures []string
	logs     []string
	cleanups []func()
}

func newRunT(ctx context.Context, name string) *runT {
	ctx, cancel := context.WithCancel(ctx)
	return &runT{name: name, ctx: ctx, cancel: cancel}
}

func (r *runT) Helper()                  {}
func (r *runT) Name() string             { return r.name }
func (r *runT) Context() context.Context { return r.ctx }
func (r *runT) Logf(format string, args ...any) {
	r.mu.Lock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}
func (r *runT) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.failed = true
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}
func (r *runT) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *runT) FailNow() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *runT) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *runT) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}
func (r *runT) TempDir() string {
	dir, err := os.MkdirTemp("", "fencelab-lab-")
	if err != nil {
		r.Fatalf("lab: temp dir: %v", err)
	}
	r.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// result returns the failures and the log recorded so far.
func (r *runT) result() (failures, logs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...), append([]string(nil), r.logs...)
}

// cleanup runs the cleanups last-in first-out, as testing does.
func (r *runT) cleanup() {
	r.cancel()
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// NewX is an X for a plain test that drives the app with a chapter's kit
// without being an experiment itself (its steps are logged all the same).
func NewX(t *testing.T, env Env) *X { return newX(t, env, Experiment{}, Guarded) }
