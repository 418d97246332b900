// Package labenv runs the book's experiments outside go test: it starts the
// deployable exactly as `serve` builds it (the program's modules, given by
// the composition root) and gives each experiment throwaway databases on a
// throwaway cluster — never the live data. The e2e harness starts apps
// through Serve too, so what the tests exercise, the lab shows.
package labenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

// Secret is the token secret of every lab app and of its child processes.
const Secret = "lab-secret-0123456789abcdef"

// Process is a served app with the parts the e2e harness also reads.
type Process struct {
	*lab.App
	Deps app.Deps
	Mods []app.Running
	Proc *app.Process
	Echo *echo.Echo // the router: its Routes() are what the HTTP contract must cover
}

// BadInput is the process whose every request is marked Req.Invalid
// (lab.App.BadInput).
func (p *Process) BadInput() *Process {
	b := *p
	b.App = p.App.BadInput()
	return &b
}

// Program is what the lab needs of the deployable, given by the composition
// root (which imports the lab, so the lab cannot import it).
type Program struct {
	// Modules is the program's module list for one app that t owns (the
	// console's runner it builds is closed when t ends).
	Modules func(t lab.T, log *slog.Logger) []app.Module
	// Invariants is the deployable's registry.
	Invariants *invariant.Registry
}

// Serve builds the program's modules on dbURL exactly as `serve` does
// (app.Build) and serves them on a loopback listener until t ends. log
// receives the app's warnings.
func Serve(t lab.T, prog Program, dbURL string, o lab.Options, log *slog.Logger) *Process {
	t.Helper()
	cfg := app.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.TokenSecret = Secret
	if o.TokenSecret != "" {
		cfg.TokenSecret = o.TokenSecret
	}
	cfg.AccessLog = false
	cfg.DataDir = t.TempDir()
	cfg.Settings = o.Settings
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	fs := faults.New()
	p, err := app.Build(context.Background(), cfg, prog.Modules(t, log), app.BuildOptions{Faults: fs, Log: log, Role: "lab"})
	if err != nil {
		t.Fatalf("labenv: build the process: %v", err)
	}
	e := p.HTTP()
	srv := httptest.NewServer(e)
	runCtx, stop := context.WithCancel(context.Background())
	wait := func() {}
	if o.Tasks {
		wait = p.Background(runCtx)
	}
	t.Cleanup(func() { stop(); wait(); srv.Close(); p.Close() })
	d := p.Deps
	a := &lab.App{
		URL: srv.URL, DBURL: dbURL, DataDir: cfg.DataDir, Pool: d.Pool, Faults: fs,
		Jobs: d.Jobs, Auth: d.Auth, Metrics: d.Metrics,
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1000}},
		Seed: func(ctx context.Context, name string) error {
			for _, m := range p.Mods {
				if m.Name == name && m.Seed != nil {
					return m.Seed(ctx)
				}
			}
			return fmt.Errorf("labenv: no module %q with a seed", name)
		},
	}
	return &Process{App: a, Deps: d, Mods: p.Mods, Proc: p, Echo: e}
}

// EnvLabDatabaseURL names a PostgreSQL server the console's experiments
// make their scratch databases on (its role must be able to create
// databases); unset, they run on a throwaway local cluster.
const EnvLabDatabaseURL = "FENCELAB_LAB_DATABASE_URL"

// Deps returns app.Deps for a service built beside the app an experiment
// started (a second report instance, a kit's direct calls): the app's
// pool, fault points, claim engine and auth, the default logger and a
// private metrics registry — the app's own modules have registered theirs.
func Deps(a *lab.App) app.Deps {
	return app.Deps{Config: app.Defaults(), Pool: a.Pool, Log: slog.Default(), Metrics: prometheus.NewRegistry(),
		Auth: a.Auth, Faults: a.Faults, Jobs: a.Jobs}
}

// ActorDeps is Deps for a service an explored actor builds (lab.Explore):
// the same parts on the actor's own pool, whose sessions the schedule
// pauses and orders, so the service's statements are the actor's. The
// pool is returned too, for the actor's own SQL.
func ActorDeps(a *lab.Actor, on *lab.App) (app.Deps, *pgxpool.Pool) {
	db := a.Pool(on.DBURL)
	d := Deps(on)
	d.Pool = db
	return d, db
}

// ChildEnv is the environment of a fencelab child process on dbURL, with
// its data directory (blob store included) under root: shared by the
// processes of one experiment, never by two.
func ChildEnv(root, dbURL string, extra ...string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "FENCELAB_") {
			env = append(env, kv)
		}
	}
	sum := sha256.Sum256([]byte(dbURL))
	env = append(env, "DATABASE_URL="+dbURL, "FENCELAB_TOKEN_SECRET="+Secret, "FENCELAB_LOG_LEVEL=warn",
		"FENCELAB_DATA_DIR="+filepath.Join(root, hex.EncodeToString(sum[:8])))
	return append(env, extra...)
}

// Cluster is the lab's environment outside go test: a throwaway PostgreSQL
// (or the server at a given URL, whose role may create databases), one
// migrated template, and a database cloned from it per experiment.
type Cluster struct {
	prog     Program
	srv      *pgserver.Server
	own      bool
	root     string // children's data directories
	binary   string
	template string
	seq      atomic.Int64
	tmplOnce sync.Once
	tmplErr  error
	strategy string // pg.CloneStrategy of the server
}

// NewCluster provisions the lab's server for prog: givenURL when set, else
// a local throwaway cluster (removed by Close).
func NewCluster(ctx context.Context, givenURL string, prog Program) (*Cluster, error) {
	srv, err := pgserver.Provision(ctx, givenURL, pgserver.Options{Ephemeral: true, MaxConnections: 200})
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "fencelab-lab-children-")
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &Cluster{prog: prog, srv: srv, own: givenURL == "", root: root, binary: bin,
		template: fmt.Sprintf("fencelab_lab_tmpl_%d", os.Getpid())}, nil
}

// Invariants is the deployable's registry.
func (c *Cluster) Invariants() *invariant.Registry { return c.prog.Invariants }

// Close removes the template and, when the cluster is the lab's own, stops it.
func (c *Cluster) Close() error {
	_ = os.RemoveAll(c.root)
	if !c.own {
		_ = dropDatabase(c.srv, c.template)
		return nil
	}
	return c.srv.Close()
}

// Database clones the migrated template into a new database for t.
func (c *Cluster) Database(t lab.T) string {
	t.Helper()
	c.tmplOnce.Do(func() { c.tmplErr = c.makeTemplate() })
	if c.tmplErr != nil {
		t.Fatalf("labenv: template database: %v", c.tmplErr)
	}
	name := fmt.Sprintf("fencelab_lab_%d_%d", os.Getpid(), c.seq.Add(1))
	if err := exec(c.srv, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s%s`, name, c.template, c.strategy)); err != nil {
		t.Fatalf("labenv: create database: %v", err)
	}
	t.Cleanup(func() { _ = dropDatabase(c.srv, name) })
	return c.srv.URL(name)
}

func (c *Cluster) makeTemplate() error {
	// The lab's scratch databases are cloned by the dozen in an exploration
	// (lab explore: one per schedule): by copying files where the server
	// can (pg.CloneStrategy; measured here at about 0.33 s against 0.56 s a
	// clone on a loaded 2-core machine).
	var version int
	if err := queryRow(c.srv, `SELECT current_setting('server_version_num')::int`, &version); err == nil {
		c.strategy = pg.CloneStrategy(version)
	}
	_ = dropDatabase(c.srv, c.template)
	if err := exec(c.srv, `CREATE DATABASE `+c.template); err != nil {
		return err
	}
	return pg.Migrator{FS: migrations.FS, URL: c.srv.URL(c.template)}.Up()
}

// Start serves the deployable on a fresh database (or o.DBURL).
func (c *Cluster) Start(t lab.T, o lab.Options) *lab.App {
	t.Helper()
	db := o.DBURL
	if db == "" {
		db = c.Database(t)
	}
	return Serve(t, c.prog, db, o, slog.New(slog.NewTextHandler(io.Discard, nil))).App
}

// Binary is this very executable: the lab is the fencelab binary, so it
// starts copies of itself for OS-process experiments.
func (c *Cluster) Binary(lab.T) string { return c.binary }

// ChildEnv is the environment of a child process on db.
func (c *Cluster) ChildEnv(db string, extra ...string) []string {
	return ChildEnv(c.root, db, extra...)
}

// Dedicated starts a server owned by t, for experiments that stop it.
func (c *Cluster) Dedicated(t lab.T) *pgserver.Server {
	t.Helper()
	s, err := pgserver.StartLocal(context.Background(), "", pgserver.Options{Ephemeral: true, MaxConnections: 100})
	if err != nil {
		t.Fatalf("labenv: dedicated server: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// DatabaseOn makes a migrated database on a dedicated server.
func (c *Cluster) DatabaseOn(t lab.T, s *pgserver.Server) string {
	t.Helper()
	name := fmt.Sprintf("fencelab_lab_%d", c.seq.Add(1))
	if err := exec(s, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("labenv: create database: %v", err)
	}
	u := s.URL(name)
	if err := (pg.Migrator{FS: migrations.FS, URL: u}).Up(); err != nil {
		t.Fatalf("labenv: migrate: %v", err)
	}
	return u
}

// onServer runs fn on a connection to s's maintenance database, within a
// minute: creating and dropping the lab's databases, which cannot be done
// from a connection to them.
func onServer(s *pgserver.Server, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL(""))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return fn(ctx, conn)
}

func exec(s *pgserver.Server, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.Exec(ctx, sql)
}

func queryRow(s *pgserver.Server, sql string, dest ...any) error {
	return onServer(s, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, sql).Scan(dest...)
	})
}

func dropDatabase(s *pgserver.Server, name string) error {
	return exec(s, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
}
