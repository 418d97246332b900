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
)

// Result is what one run showed: its timeline, the book's figure line and
// each invariant's outcome. The console draws it; `lab run --json` prints it.
type Result struct {
	ID         string          `json:"id"`
	Chapter    string          `json:"chapter"`
	Claim      string          `json:"claim"`
	Naive      bool            `json:"naive"`
	NaiveHow   string          `json:"naive_how,omitempty"`
	Started    time.Time       `json:"started"` // the first step, database clock
	Timeline   []Step          `json:"timeline"`
	Figure     map[string]any  `json:"figure,omitempty"`
	Invariants []InvariantView `json:"invariants"`
	Failures   []string        `json:"failures,omitempty"` // the experiment's own assertions
	Log        []string        `json:"log,omitempty"`
	// Holds: the claim held — no assertion failed and every invariant held.
	Holds bool `json:"holds"`
	// Caught: a naive run was caught by one of the experiment's Catches.
	Caught bool `json:"caught"`
}

// InvariantView is one invariant's outcome, ready to print or draw.
type InvariantView struct {
	ID        string   `json:"id"`
	Statement string   `json:"statement"`
	SQL       string   `json:"sql,omitempty"`
	Holds     bool     `json:"holds"`
	Columns   []string `json:"columns,omitempty"`
	Rows      [][]any  `json:"rows,omitempty"`
	More      bool     `json:"more,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// Test runs e under go test: the guarded version must hold its claim and
// every invariant; the naive version (a subtest) must be caught. Each step
// is logged, so `go test -v -run TestX` tells the story.
func Test(t *testing.T, e Experiment, env Env) {
	t.Helper()
	x := newX(t, env, false)
	t.Logf("%s — %s", e.ID, e.Claim)
	e.Run(x)
	if t.Failed() {
		return
	}
	for _, v := range x.check(e) {
		if !v.Holds {
			t.Errorf("%s", formatInvariant(v))
		}
	}
	x.logFigure()
	if e.Naive != "" {
		t.Run("naive", func(t *testing.T) { TestNaive(t, e, env) })
	}
}

// TestNaive runs e's naive version and asserts one of e.Catches catches it:
// the proof that the invariant can fail.
func TestNaive(t *testing.T, e Experiment, env Env) {
	t.Helper()
	if e.Naive == "" {
		t.Fatalf("%s has no naive version", e.ID)
	}
	x := newX(t, env, true)
	t.Logf("%s (naive: %s)", e.ID, e.Naive)
	e.Run(x)
	if t.Failed() {
		return
	}
	views := x.check(e)
	for _, v := range views {
		if !v.Holds {
			t.Logf("caught, as it should be:\n%s", formatInvariant(v))
		}
	}
	if !caught(e, views) {
		t.Errorf("the naive version of %s was not caught by %v", e.ID, e.Catches)
	}
}

func newX(t T, env Env, naive bool) *X {
	return &X{T: t, Env: env, Naive: naive, start: time.Now(), echo: true}
}

// Run runs e outside go test (the CLI, the console): failures are recorded,
// not fatal, and every resource the run made is removed before it returns.
func Run(ctx context.Context, e Experiment, env Env, naive bool) Result {
	rt := newRunT(ctx, e.ID)
	x := &X{T: rt, Env: env, Naive: naive, start: time.Now()}
	res := Result{ID: e.ID, Chapter: chapterOf(e.ID), Claim: e.Claim, Naive: naive}
	if naive {
		res.NaiveHow = e.Naive
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				rt.Errorf("panic: %v", p)
			}
		}()
		if naive && e.Naive == "" {
			rt.Fatalf("%s has no naive version", e.ID)
		}
		e.Run(x)
		if !rt.Failed() {
			res.Invariants = x.check(e)
		}
	}()
	<-done
	rt.cleanup()
	res.Started = x.t0
	res.Timeline = x.Steps()
	res.Figure = x.figure
	res.Failures, res.Log = rt.failures, rt.logs
	res.Holds = len(res.Failures) == 0 && len(res.Invariants) > 0
	for _, v := range res.Invariants {
		res.Holds = res.Holds && v.Holds
	}
	res.Caught = naive && caught(e, res.Invariants)
	return res
}

func caught(e Experiment, views []InvariantView) bool {
	for _, v := range views {
		for _, c := range e.Catches {
			if !v.Holds && v.Error == "" && v.ID == c {
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
	var out []InvariantView
	for _, r := range reg.Run(ctx, pool, e.Invariants...) {
		v := InvariantView{ID: r.ID, Statement: r.Statement, SQL: r.SQL, Holds: r.Holds(),
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
func NewX(t *testing.T, env Env) *X { return newX(t, env, false) }
