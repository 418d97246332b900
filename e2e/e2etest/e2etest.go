// Package e2etest starts the real deployable for experiments: a fresh
// migrated database, every module of program.Modules, the real echo app
// on a real loopback listener, tokens minted with the app's own secret, and
// the fencelab binary for process-level experiments.
package e2etest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/program"
)

// Secret is the token secret of every test app (and of child processes).
const Secret = labenv.Secret

// App is a running deployable under test: the lab's app plus the process
// parts only tests read (the modules, their dependencies).
type App struct{ *labenv.Process }

// Options tune Start (the lab's options: tasks, pool size, settings).
type Options = lab.Options

// Req and Response are the lab's HTTP request and fully read response.
type (
	Req      = lab.Req
	Response = lab.Response
)

// Start builds and serves the whole app on a fresh database.
func Start(t testing.TB, o Options) *App {
	t.Helper()
	dbURL := o.DBURL
	if dbURL == "" {
		dbURL = pgtest.URL(t)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := labenv.Serve(t, program.Lab(), dbURL, o, log)
	p.Check, p.Reporter = checkContract(p.App), t // every exchange against the OpenAPI contract (contract.go)
	return &App{p}
}

// StartParallel is Start for a test that runs parallel to its package's
// others, as most do: each app has a database of its own.
func StartParallel(t *testing.T, o Options) *App {
	t.Helper()
	t.Parallel()
	return Start(t, o)
}

// BadInput is the app whose every request is marked Req.Invalid, for
// bad-input tests whose helpers build the requests: only the answers are
// checked against the contract.
func (a *App) BadInput() *App { return &App{a.Process.BadInput()} }

// Invariants is the deployable's invariant registry (program.Invariants).
var Invariants = program.Invariants

// Assert runs the deployable's invariants selected by module or ID, and
// fails the test with every violating row.
func Assert(t testing.TB, db pg.Querier, names ...string) {
	t.Helper()
	program.Invariants().Assert(t, db, names...)
}

// Corruption is one way of breaking an invariant behind the service's
// back: the statements that break it and the invariant (ID) that must
// report it.
type Corruption struct {
	ID, Name string
	SQL      []string
}

// RequireCaught writes each corruption in a transaction of its own, rolled
// back afterwards (so each starts from the same healthy state), and
// requires its invariant to report rows: a check that cannot fail would
// prove nothing.
func RequireCaught(t testing.TB, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, cs []Corruption) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cs {
		func() {
			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }() // a failed require must not strand the connection
			for _, sql := range c.SQL {
				_, err := tx.Exec(ctx, sql)
				require.NoError(t, err, c.Name)
			}
			res := Invariants().Run(ctx, tx, c.ID)
			require.Len(t, res, 1)
			require.NoError(t, res[0].Err, c.Name)
			require.False(t, res[0].Holds(), "%s: %s should report it", c.ID, c.Name)
		}()
	}
}

// testWriter sends app logs to the test log (shown on failure).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Env is the lab's environment under go test: databases cloned from the
// migrated template, the binary built once per test process.
var Env lab.Env = testEnv{}

type testEnv struct{}

func (testEnv) Database(t lab.T) string { return pgtest.URL(t.(testing.TB)) }
func (testEnv) Start(t lab.T, o lab.Options) *lab.App {
	return Start(t.(testing.TB), o).App
}
func (testEnv) Binary(t lab.T) string                        { return Binary(t.(testing.TB)) }
func (testEnv) ChildEnv(db string, extra ...string) []string { return ChildEnv(db, extra...) }
func (testEnv) Dedicated(t lab.T) *pgserver.Server {
	return pgtest.Dedicated(t.(testing.TB))
}
func (testEnv) Invariants() *invariant.Registry { return program.Invariants() }
func (testEnv) DatabaseOn(t lab.T, s *pgserver.Server) string {
	return pgtest.URLOn(t.(testing.TB), s)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Main runs the package's tests, then removes the built binary and stops
// the shared PostgreSQL. Every e2e package calls it from TestMain.
func Main(m *testing.M) { MainThen(m, nil) }

// MainThen is Main with after run once the tests end (a package's shared
// browser, say), before the shared parts are removed.
func MainThen(m *testing.M, after func()) {
	code := m.Run()
	if after != nil {
		after()
	}
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	if root := childRoot(); root != os.TempDir() {
		_ = os.RemoveAll(root)
	}
	pgtest.Shutdown()
	os.Exit(code)
}

// EnvBinary names a fencelab binary already built from this tree: ./test
// builds it once and every test process runs it, instead of each e2e
// package linking its own copy (a link is seconds of CPU, paid a dozen
// times in a full run).
const EnvBinary = "FENCELAB_TEST_BINARY"

// Binary returns the fencelab binary the tests run: FENCELAB_TEST_BINARY's
// when set, else cmd/fencelab built once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v (unset it, and the test builds its own)", EnvBinary, p, err)
		}
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencelab-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fencelab")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/fencelab/fencelab/cmd/fencelab")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// ChildEnv is the environment for a fencelab child process on dbURL.
func ChildEnv(dbURL string, extra ...string) []string {
	return labenv.ChildEnv(childRoot(), dbURL, extra...)
}

// childRoot holds the data directories of this test process's children;
// Main removes it.
var childRoot = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "fencelab-children-")
	if err != nil {
		return os.TempDir()
	}
	return dir
})

// Experiments runs a chapter's list of lab experiments (its lab package's
// Experiments) as tests, each a subtest named by the experiment's Test: the
// guarded version must hold its claim and invariants, the naive version
// (subtest "naive") must be caught and its control (subtest "control")
// must hold. Each step of the timeline is logged (go test -v tells the
// story). The test and every subtest run parallel: each experiment runs in
// databases and processes of its own, so a chapter's experiments never
// share state. One experiment alone:
// `go test -v -run '^TestExperiments$/^TestPTS01ConcurrentDebitsNeverOverdraw$' ./e2e/...`.
func Experiments(t *testing.T, es []lab.Experiment) {
	t.Helper()
	t.Parallel()
	for _, e := range es {
		t.Run(e.Test, func(t *testing.T) {
			t.Parallel()
			lab.Test(t, e, Env)
		})
	}
}

// X is a guarded lab run for a plain test: the chapters' kits take one.
func X(t *testing.T) *lab.X { return lab.NewX(t, Env) }

// StartLab is a plain test's usual opening, in one place: the test runs
// parallel to its package's others (a chapter's lab has a database and
// an app of its own, so nothing is shared), and start — a chapter kit's
// StartLab — gets a guarded lab run and o.
func StartLab[L any](t *testing.T, start func(*lab.X, lab.Options) L, o Options) L {
	t.Helper()
	t.Parallel()
	return start(X(t), o)
}
