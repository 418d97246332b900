package lab

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
)

// Env gives an experiment the real parts it runs on. Tests get them from the
// test harness (a cloned template database per test); `fencelab lab run`
// and the console get them from a throwaway cluster, never the live data.
type Env interface {
	// Database returns the URL of a fresh, migrated scratch database that is
	// removed when t ends.
	Database(t T) string
	// Start builds and serves the whole deployable, exactly as `serve`
	// builds it, on a scratch database (or o.DBURL).
	Start(t T, o Options) *App
	// Binary is the fencelab binary, for experiments with OS processes.
	Binary(t T) string
	// ChildEnv is the environment of a fencelab child process on db.
	ChildEnv(db string, extra ...string) []string
	// Dedicated starts a PostgreSQL server owned by t, for experiments that
	// stop it; DatabaseOn gives a scratch database on such a server.
	Dedicated(t T) *pgserver.Server
	DatabaseOn(t T, s *pgserver.Server) string
	// Invariants is the deployable's invariant registry.
	Invariants() *invariant.Registry
}

// Options tune Start.
type Options struct {
	// Tasks runs every module's background tasks and the claim engine's
	// worker pool (off by default, so an experiment controls its timeline).
	Tasks bool
	// MaxConns for the app's pool (0: the production default).
	MaxConns int
	// Settings are module settings (as environment variables would give).
	Settings map[string]string
	// TokenSecret replaces the app's token secret ("" keeps the default).
	TokenSecret string
	// DBURL uses an existing database instead of a fresh one.
	DBURL string
}

// X is one run of an experiment: the test (or the CLI's stand-in), the
// variant, and the recorder of its timeline.
type X struct {
	T
	// Naive runs the naive version of the timeline (also in a control run:
	// the control is the naive code).
	Naive bool
	// Control runs the naive version's control: the naive code with the
	// race or the fault taken out (Experiment.Control says how).
	Control bool
	Env     Env

	expected []string // Experiment.ExpectedErrors

	mu       sync.Mutex
	steps    []Step
	figure   map[string]any
	db       string        // the database the invariants are checked on
	dbOffset time.Duration // database clock − local clock
	start    time.Time
	t0       time.Time // the first step's time: the timeline's zero
	echo     bool      // log each step through T (go test -v tells the story)

	overlap   bool         // Experiment.Overlap: the run must observe one
	overlaps  []string     // the overlaps observed (x.Overlap, the watcher)
	actorApps []string     // application_names whose sessions act for actors (ActorSessions)
	watchStop func()       // stops the overlap watcher
	samples   atomic.Int64 // pg_stat_activity samples the watcher has judged

	sched *scheduler // a scheduled run (lab explore, lab run --schedule); nil otherwise
}

// Step is one line of the timeline: who did what, when by the database's
// clock, and what came of it.
type Step struct {
	Actor   string    `json:"actor"`             // client-1, process-A, worker, consumer, db
	At      time.Time `json:"at"`                // database clock
	Action  string    `json:"action"`            // "debit 30", "write report", "claim job 7"
	Outcome string    `json:"outcome,omitempty"` // accepted, refused, replayed, lost answer, …
	Fence   int64     `json:"fence,omitempty"`   // the fence (or version) involved, if any
	Note    string    `json:"note,omitempty"`
	// DBTime is the database's own time of the step's statement
	// (clock_timestamp() returned by that statement, a row's commit-time
	// column, or pg_stat_activity's query_start), and DBEnd when the
	// statement's end is known too. At is when the lab saw the step; only
	// DBTime and DBEnd can show that two actors overlapped at the database.
	DBTime time.Time `json:"db_time,omitzero"`
	DBEnd  time.Time `json:"db_end,omitzero"`
}

// Outcomes every chapter shares; a step may use any other word.
const (
	Accepted = "accepted"
	Refused  = "refused"
	Replayed = "replayed"
	Lost     = "lost answer"
	Violates = "violates" // a naive step that does what the guard forbids
)

// Step records a step of the timeline (safe from any goroutine).
func (x *X) Step(s Step) {
	x.Helper()
	if s.At.IsZero() {
		s.At = time.Now().Add(x.dbOffset)
	}
	x.mu.Lock()
	if len(x.steps) == 0 {
		x.t0 = s.At
	}
	x.steps = append(x.steps, s)
	t0 := x.t0
	x.mu.Unlock()
	if x.echo {
		x.Logf("%s", FormatStep(s, t0))
	}
}

// Error records an actor's error as a step of the timeline and fails the
// run unless the experiment declares it (Experiment.ExpectedErrors): an
// error nobody predicted means the run did not show what it claims,
// whichever version ran. It reports whether the error was expected. Safe
// from any goroutine (it never stops the calling goroutine).
func (x *X) Error(actor, action string, err error) bool {
	x.Helper()
	for _, want := range x.expected {
		if strings.Contains(err.Error(), want) {
			x.Step(Step{Actor: actor, Action: action, Outcome: "expected error", Note: err.Error()})
			return true
		}
	}
	x.Step(Step{Actor: actor, Action: action, Outcome: "error", Note: err.Error()})
	x.Errorf("%s: %s: unexpected error (not among the experiment's ExpectedErrors): %v", actor, action, err)
	return false
}

// Say records a narration step by actor.
func (x *X) Say(actor, format string, args ...any) {
	x.Step(Step{Actor: actor, Action: fmt.Sprintf(format, args...)})
}

// Figure sets one entry of the book's figure line, e.g.
// {"os_processes":2,"claims":1,"effects":1,"state":"succeeded"}.
func (x *X) Figure(key string, v any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.figure == nil {
		x.figure = map[string]any{}
	}
	x.figure[key] = v
}

// Database is Env.Database that also makes it the database the experiment's
// invariants are checked on (the first one asked for).
func (x *X) Database() string {
	x.Helper()
	u := x.Env.Database(x.T)
	x.useDB(u)
	return u
}

// Start is Env.Start on the experiment's database; the first app started
// names the database the invariants are checked on.
func (x *X) Start(o Options) *App {
	x.Helper()
	a := x.Env.Start(x.T, o)
	if a.Pool != nil {
		// The app's sessions serve the actors' requests: the overlap
		// watcher counts them as actors.
		x.ActorSessions(a.Pool.Config().ConnConfig.RuntimeParams["application_name"])
	}
	x.useDB(a.DBURL)
	return a
}

// CheckOn names the database the invariants are checked on (for experiments
// whose main database is not the first one they open).
func (x *X) CheckOn(url string) {
	x.mu.Lock()
	x.db = url
	x.mu.Unlock()
}

func (x *X) useDB(url string) {
	x.mu.Lock()
	first := x.db == ""
	if first {
		x.db = url
	}
	x.mu.Unlock()
	if first {
		x.syncClock(url)
		if x.overlap {
			x.watch(url)
		}
	}
}

// syncClock measures the database clock against the local one once, so
// every step is stamped in database time without a round trip per step.
func (x *X) syncClock(url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return
	}
	defer pool.Close()
	// The pool connects lazily: connect first, so no sample's round trip
	// includes the connection's setup (on a loaded machine that skewed
	// the midpoint by a quarter second). The sample with the shortest
	// round trip brackets the database's clock the tightest.
	if pool.Ping(ctx) != nil {
		return
	}
	best := time.Duration(-1)
	for range 3 {
		before := time.Now()
		var db time.Time
		if pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db) != nil {
			return
		}
		if rtt := time.Since(before); best < 0 || rtt < best {
			best, x.dbOffset = rtt, db.Sub(before.Add(rtt/2))
		}
	}
}

// Steps returns a copy of the timeline so far.
func (x *X) Steps() []Step {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]Step(nil), x.steps...)
}

// FormatStep renders one step as a line: "+0.153s  client-3    debit 30 → refused (fence 4)".
func FormatStep(s Step, t0 time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%7.3fs  %-12s %s", s.At.Sub(t0).Seconds(), s.Actor, s.Action)
	if s.Outcome != "" {
		fmt.Fprintf(&b, " → %s", s.Outcome)
	}
	if s.Fence != 0 {
		fmt.Fprintf(&b, " (fence %d)", s.Fence)
	}
	if s.Note != "" {
		fmt.Fprintf(&b, "  — %s", s.Note)
	}
	if !s.DBTime.IsZero() {
		fmt.Fprintf(&b, "  [db %+.6fs", s.DBTime.Sub(t0).Seconds())
		if !s.DBEnd.IsZero() {
			fmt.Fprintf(&b, " … %+.6fs", s.DBEnd.Sub(t0).Seconds())
		}
		b.WriteString("]")
	}
	return b.String()
}

// Assert checks the named invariants (modules or IDs) on db now, failing
// the run with every violating row: for an experiment that checks a
// database besides the one the runner checks at its end.
func (x *X) Assert(db pg.Querier, names ...string) {
	x.Helper()
	x.Env.Invariants().Assert(x, db, names...)
}
