// Package e2etest starts the real deployable for experiments: a fresh
// migrated database, every module built by services.All, the real echo app
// on a real loopback listener, tokens minted with the app's own secret, and
// the fencelab binary for process-level experiments.
package e2etest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/services"
)

// Secret is the token secret of every test app (and of child processes).
const Secret = "e2e-secret-0123456789abcdef"

// App is a running deployable under test.
type App struct {
	URL    string // base URL of the HTTP server
	DBURL  string // the test's own database
	Pool   *pgxpool.Pool
	Deps   app.Deps
	Mods   []app.Module
	Faults *faults.Set
	Client *http.Client
	Echo   *echo.Echo // the app's router (its Routes() are what the contract must cover)

	t       testing.TB // the test that started the app: contract failures are reported on it
	invalid bool       // every request is Req.Invalid (BadInput)
}

// BadInput returns a view of the app whose every request is marked
// Req.Invalid: for bad-input tests whose helpers build the requests. Only
// the responses are checked against the contract.
func (a *App) BadInput() *App {
	b := *a
	b.invalid = true
	return &b
}

// Options tune Start.
type Options struct {
	// Tasks runs every module's background tasks and the claim engine's
	// worker pool and recovery (off by default so an experiment controls its
	// own timeline).
	Tasks bool
	// MaxConns for the app's pool (0: production default).
	MaxConns int
	// Config edits the app config before modules are built.
	Config func(*app.Config)
	// DBURL uses an existing database instead of a fresh clone.
	DBURL string
}

// Start builds and serves the whole app on a fresh database.
func Start(t testing.TB, o Options) *App {
	t.Helper()
	dbURL := o.DBURL
	if dbURL == "" {
		dbURL = pgtest.URL(t)
	}
	cfg := app.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.TokenSecret = Secret
	cfg.AccessLog = false
	cfg.DataDir = t.TempDir()
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	pool := pgtest.Pool(t, dbURL, int32(cfg.MaxConns))
	auth, err := httpx.NewAuth([]byte(cfg.TokenSecret))
	require.NoError(t, err)
	fs := faults.New()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d := app.Deps{Config: cfg, Pool: pool, Log: log, Metrics: app.NewMetrics(pool), Auth: auth, Faults: fs}
	d.Jobs = app.NewJobs(pool, log, d.Metrics, fs)
	mods, err := services.All(d)
	require.NoError(t, err)
	e := app.NewHTTP(d, mods)
	srv := httptest.NewServer(e)
	a := &App{Echo: e, URL: srv.URL, DBURL: dbURL, Pool: pool, Deps: d, Mods: mods, Faults: fs, t: t,
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 0}}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if o.Tasks {
		wg.Add(1)
		go func() { defer wg.Done(); app.RunTasks(ctx, log, mods) }()
		wg.Add(1)
		go func() { defer wg.Done(); _ = app.RunJobs(ctx, d, claim.PoolOptions{}) }()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Close()
	})
	return a
}

// testWriter sends app logs to the test log (shown on failure).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Token mints a token for sub with role (valid one hour).
func (a *App) Token(t testing.TB, sub string, role httpx.Role) string {
	t.Helper()
	tok, err := a.Deps.Auth.Mint(sub, role, time.Hour)
	require.NoError(t, err)
	return tok
}

// Response is a fully read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// Code returns the problem code of an error response ("" otherwise).
func (r Response) Code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

// Req describes a request.
type Req struct {
	Method  string
	Path    string
	Token   string
	Body    any // marshalled as JSON unless []byte or string
	Headers map[string]string
	// Invalid marks a request that deliberately breaks the contract (a
	// bad-input test): it is sent as it is and only the response is checked
	// against the document. Every other request must be one the document
	// allows.
	Invalid bool
}

// Do sends r and reads the whole response. Transport errors fail the test;
// use Send for experiments that expect them. Both check the exchange
// against the OpenAPI contract (see contract.go); Do reports a violation
// on t, Send on the test that started the app.
func (a *App) Do(t testing.TB, r Req) Response {
	t.Helper()
	resp, err := a.send(context.Background(), r, t)
	require.NoError(t, err)
	return resp
}

// Send is Do without the test: it returns transport errors (timeouts,
// dropped connections) to the caller.
func (a *App) Send(ctx context.Context, r Req) (Response, error) {
	return a.send(ctx, r, a.t)
}

func (a *App) send(ctx context.Context, r Req, t testing.TB) (Response, error) {
	var raw []byte
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		raw = buf
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, a.URL+r.Path, body)
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if t != nil {
		r.Invalid = r.Invalid || a.invalid
		if err := a.checkContract(r, req, raw, out); err != nil {
			t.Errorf("contract: %s %s → %d: %v\nresponse body: %.2000s", r.Method, r.Path, out.Status, err, b)
		}
	}
	return out, nil
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Main runs the package's tests, then removes the built binary and stops
// the shared PostgreSQL. Every e2e package calls it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	if root := childRoot(); root != os.TempDir() {
		_ = os.RemoveAll(root)
	}
	pgtest.Shutdown()
	os.Exit(code)
}

// Binary builds cmd/fencelab once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
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
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "FENCELAB_") {
			env = append(env, kv)
		}
	}
	env = append(env, "DATABASE_URL="+dbURL, "FENCELAB_TOKEN_SECRET="+Secret, "FENCELAB_LOG_LEVEL=warn",
		"FENCELAB_DATA_DIR="+childDataDir(dbURL))
	return append(env, extra...)
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

// childDataDir is the data directory (blob store included) of the child
// processes on dbURL: shared by the processes of one experiment, never by
// two experiments, whose databases differ.
func childDataDir(dbURL string) string {
	sum := sha256.Sum256([]byte(dbURL))
	return filepath.Join(childRoot(), hex.EncodeToString(sum[:8]))
}
