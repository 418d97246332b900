// Package lab defines the book's experiments as values. One definition is
// run three ways: by `go test` (asserting), by `fencelab lab run` (narrating
// a timeline on a scratch database) and by the web console (drawing it).
//
// An experiment never reaches for the process or the database itself: it
// asks its *X for them (a scratch database, a running app, the fencelab
// binary), so the same body runs under testing.T and under the CLI. The
// naive version of a chapter lives inside its experiment (X.Naive), never as
// a switch in the product.
package lab

import (
	"context"
	"strings"
)

// Chapter is one chapter of the book, in reading order.
type Chapter struct {
	N     int    // 1-based position in the book
	Slug  string // experiment IDs start with it: "points/concurrent-debits"
	Title string
}

// Chapters is the one chapter numbering of the project: docs/chapters,
// `lab list`, `check --list`, the console and code comments all use it.
var Chapters = []Chapter{
	{1, "lease", "Leases and fencing tokens"},
	{2, "claim", "The claim engine: SKIP LOCKED jobs with fences"},
	{3, "idem", "Idempotency keys"},
	{4, "outbox", "The transactional outbox"},
	{5, "points", "Points ledger"},
	{6, "reservations", "Flash sale: reservations"},
	{7, "orders", "Flash sale: orders and an uncertain payment channel"},
	{8, "relations", "Follow relations as authorization"},
	{9, "feed", "Home feed: push, pull and hybrid"},
	{10, "likes", "Like counters"},
	{11, "notify", "Notifications"},
	{12, "shortlink", "Short links"},
	{13, "upload", "Chunked upload"},
	{14, "failover", "The database fails over"},
}

// ChapterOf returns the chapter with slug, and whether it exists.
func ChapterOf(slug string) (Chapter, bool) {
	for _, c := range Chapters {
		if c.Slug == slug {
			return c, true
		}
	}
	return Chapter{}, false
}

// Experiment is one runnable claim of the book.
type Experiment struct {
	// ID is "<chapter slug>/<name>", e.g. "points/concurrent-debits".
	ID string
	// Test names the e2e test that runs it: the subtest of its chapter's
	// TestExperiments (kept so nothing a reader already knows is lost),
	// e.g. "TestPTS01ConcurrentDebitsNeverOverdraw".
	Test string
	// Claim is the one sentence the experiment proves.
	Claim string
	// Invariants are checked after the run (IDs or module names, as
	// invariant.Select takes them); a guarded run must hold them all.
	Invariants []string
	// Naive describes the naive version ("" when there is none): the same
	// timeline written the way the book says fails. A naive run must be
	// caught by one of Catches, and Catches are data invariants: what
	// catches it is a row the timeline wrote, never a guard missing from
	// the schema (a schema invariant).
	Naive   string
	Catches []string
	// Control describes the naive version's control ("" when it has
	// none): the same naive code with the race or the fault taken out (one
	// actor, in-order delivery, no crash, no stall). It must hold. Beside
	// the naive run it shows that the naive code alone does not break the
	// invariant: the interleaving does. In a control run x.Naive and
	// x.Control are both true.
	Control string
	// NoNaive says, in one line, why an experiment has no naive version
	// ("" when it has one, or when nothing more specific than the
	// console's generic sentence applies). The reader of a chapter sees
	// every experiment's naive version or the reason it has none.
	NoNaive string
	// ExpectedErrors are the actor errors the experiment declares as
	// outcomes (a substring of the error: a SQLSTATE, a sentinel's text).
	// Any other error an actor reports through x.Error fails the run,
	// guarded, naive or control: a naive run whose writes all failed
	// proves nothing.
	ExpectedErrors []string
	// Overlap marks a claim that depends on actors being in the critical
	// section at the same time (it says "concurrent", "at once", "race"):
	// a guarded run must observe the overlap at the database — a lock
	// wait, two actors' statements overlapping in database time, or a
	// pause point both reached — or it fails with "no overlap observed".
	// A run that happened to be serial proves nothing about the race.
	Overlap bool
	// Run is the timeline. It fails through x (x.Fatalf, require.*(x, …));
	// x.Naive and x.Control say which version to run.
	Run func(x *X)
	// Explore, when set, declares the experiment's actors and steps and
	// the body that runs one schedule of them: `fencelab lab explore` runs
	// it under every schedule (explore.go).
	Explore *Explore
}

// Variant is one way to run an experiment.
type Variant int

const (
	Guarded Variant = iota // the product's code: every invariant must hold
	Naive                  // the naive code with its race or fault: Catches must catch it
	Control                // the naive code without the race or fault: it must hold
)

func (v Variant) String() string {
	switch v {
	case Naive:
		return "naive"
	case Control:
		return "control"
	}
	return "guarded"
}

// T is the part of testing.TB an experiment uses; *testing.T has it, and so
// does the CLI's runner.
type T interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
	Failed() bool
	Cleanup(func())
	TempDir() string
	Name() string
	Context() context.Context
}

// Sorted orders experiments by chapter, keeping each chapter's own order.
func Sorted(es []Experiment) []Experiment {
	out := make([]Experiment, 0, len(es))
	for _, c := range Chapters {
		for _, e := range es {
			if slug, _, _ := strings.Cut(e.ID, "/"); slug == c.Slug {
				out = append(out, e)
			}
		}
	}
	return out
}

// Find returns the experiment with id.
func Find(es []Experiment, id string) (Experiment, bool) {
	for _, e := range es {
		if e.ID == id {
			return e, true
		}
	}
	return Experiment{}, false
}

// invariantChapters maps an invariant ID's prefix to its chapter.
var invariantChapters = map[string]string{
	"LOCK": "lease", "CLAIM": "claim", "IDEM": "idem", "OUTBOX": "outbox", "PTS": "points",
	"FS": "reservations", "ORD": "orders", "REL": "relations", "FEED": "feed", "LIKE": "likes",
	"NTF": "notify", "SL": "shortlink", "UP": "upload", "FO": "failover",
}

// ChapterOfInvariant returns the chapter slug an invariant ID belongs to
// ("" for the foundation's CORE-… invariants, which belong to no chapter).
func ChapterOfInvariant(id string) string {
	prefix, _, _ := strings.Cut(id, "-")
	return invariantChapters[prefix]
}

// Exercises reports whether e checks the invariant (by ID or module).
func (e Experiment) Exercises(id, module string) bool {
	for _, n := range append(append([]string(nil), e.Invariants...), e.Catches...) {
		if n == id || n == module {
			return true
		}
	}
	return false
}
