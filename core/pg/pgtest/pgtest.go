// Package pgtest gives every test a fresh, migrated PostgreSQL database.
//
// One server per `go test` process (FENCELAB_TEST_DATABASE_URL if set, else a
// throwaway local cluster, else a container), one migrated template per
// migration hash, and a clone per test through pgtestdb — CREATE DATABASE …
// TEMPLATE takes milliseconds, so every test may own its database and run
// with t.Parallel(). A failed test's database is kept for inspection.
//
// Packages call Main from TestMain so the server stops when the tests end;
// if the process dies first, the postmaster dies with it (Pdeathsig) and the
// next run reaps the directory.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/golangmigrator"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

// EnvURL names a server the tests should use instead of starting one. The
// role must be able to create roles and databases.
const EnvURL = "FENCELAB_TEST_DATABASE_URL"

var (
	once      sync.Once
	shared    *pgserver.Server
	sharedErr error
	started   time.Duration
)

// Main runs the package's tests and stops the shared server afterwards.
func Main(m *testing.M) {
	code := m.Run()
	Shutdown()
	os.Exit(code)
}

// Shutdown stops the shared server (for TestMain functions that do more).
func Shutdown() {
	if shared != nil {
		_ = shared.Close()
	}
}

// Server returns the process's shared server, starting it on first use.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	once.Do(func() {
		begin := time.Now()
		shared, sharedErr = pgserver.Provision(context.Background(), os.Getenv(EnvURL),
			pgserver.Options{Ephemeral: true, Container: testcontainer, Seed: seedTemplate, SeedKey: seedKey()})
		started = time.Since(begin)
	})
	if sharedErr != nil {
		t.Fatalf("pgtest: %v", sharedErr)
	}
	return shared
}

// StartupCost is how long the shared server took to become ready (zero
// until Server has run); the harness test prints it.
func StartupCost() time.Duration { return started }

// Dedicated starts a server owned by one test — for experiments that stop
// and restart PostgreSQL (LIKE-03) and must not disturb anyone else. It needs
// local binaries; it skips nothing silently: without them the test fails.
// Like the shared server it runs with fsync and synchronous_commit off, so
// an immediate stop loses the last commits unless the sessions set
// synchronous_commit=on (a runtime parameter in the URL will do).
func Dedicated(t testing.TB) *pgserver.Server {
	t.Helper()
	s, err := pgserver.StartLocal(context.Background(), "", pgserver.Options{Ephemeral: true, MaxConnections: 100})
	if err != nil {
		t.Fatalf("pgtest: dedicated server: %v", err)
	}
	t.Cleanup(func() { dedicatedRoles.Delete(s); _ = s.Close() })
	r := Role
	r.Username = fmt.Sprintf("%s_d%d", Role.Username, dedicatedSeq.Add(1))
	dedicatedRoles.Store(s, &r)
	return s
}

// Role is the role tests connect as. It is not a superuser, like the role a
// deployment would use, but may create databases for the cloning.
var Role = pgtestdb.Role{Username: "fencelab_test", Password: "fencelab_test", Capabilities: "NOSUPERUSER NOCREATEDB NOCREATEROLE"}

// dedicatedRoles names the test role on each Dedicated server. pgtestdb
// remembers per process, by role name, that it created a role and its
// template — not on which server — so a second server under the shared
// role's name would be handed a template it never got.
var (
	dedicatedRoles sync.Map // *pgserver.Server → *pgtestdb.Role
	dedicatedSeq   atomic.Int64
)

func roleOn(s *pgserver.Server) *pgtestdb.Role {
	if r, ok := dedicatedRoles.Load(s); ok {
		return r.(*pgtestdb.Role)
	}
	return &Role
}

func config(s *pgserver.Server) pgtestdb.Config {
	return pgtestdb.Config{
		DriverName:                fileCopyDriver(),
		Host:                      s.Host,
		Port:                      strconv.Itoa(s.Port),
		User:                      s.User,
		Password:                  s.Password,
		Database:                  "postgres",
		Options:                   "sslmode=disable",
		TestRole:                  roleOn(s),
		ForceTerminateConnections: true,
	}
}

var migrator = golangmigrator.New(".", golangmigrator.WithFS(migrations.FS))

// seedTemplate makes, on the server pgserver caches as every test
// process's starting cluster, what pgtestdb would otherwise make in each
// process: the test role and the migrated template database (pgtestdb
// finds both there and skips them). It clones one database the way a
// test does and drops it again.
func seedTemplate(ctx context.Context, s *pgserver.Server) error {
	tb := &seedTB{}
	pgtestdb.Custom(tb, config(s), migrator)
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	return tb.err
}

// seedKey names what seedTemplate makes: the role and the migrations.
func seedKey() string {
	h, err := migrator.Hash()
	if err != nil {
		h = "unhashed:" + err.Error() // pgtestdb fails the same way later, with this error
	}
	return fmt.Sprintf("pgtestdb|%s|%s|%s|%s", Role.Username, Role.Password, Role.Capabilities, h)
}

// seedTB is the testing.TB pgtestdb asks for, outside any test: it keeps
// the first failure and the clean-ups.
type seedTB struct {
	err      error
	cleanups []func()
}

func (b *seedTB) Cleanup(f func())    { b.cleanups = append(b.cleanups, f) }
func (b *seedTB) Failed() bool        { return b.err != nil }
func (b *seedTB) Helper()             {}
func (b *seedTB) Logf(string, ...any) {}
func (b *seedTB) Fatalf(f string, a ...any) {
	if b.err == nil {
		b.err = fmt.Errorf(f, a...)
	}
}

// URL returns the URL of a fresh migrated database on the shared server,
// dropped when the test passes. Child processes of the test connect with it.
func URL(t testing.TB) string {
	t.Helper()
	return URLOn(t, Server(t))
}

// URLOn is URL on a given server (e.g. a Dedicated one).
func URLOn(t testing.TB, s *pgserver.Server) string {
	t.Helper()
	return pgtestdb.Custom(t, config(s), migrator).URL()
}

// New returns a pool on a fresh migrated database; the pool is closed when
// the test ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, URL(t), 0)
}

// Pool opens a pool on url with maxConns (0 = the production default) and
// closes it when the test ends.
func Pool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pg.Connect(ctx, url, pg.PoolOptions{MaxConns: maxConns, ApplicationName: "fencelab-test"})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// FreePort returns a free loopback TCP port (for servers the tests start).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Describe is a one-line summary of the shared server for logs.
func Describe(s *pgserver.Server) string {
	return fmt.Sprintf("%s server at %s:%d", s.Strategy, s.Host, s.Port)
}
