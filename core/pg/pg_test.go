package pg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The harness must hand out a real PostgreSQL, not a stand-in: the server
// reports its version, and a CHECK violation comes back from the server as
// the mapped sentinel with the constraint's name.
func TestHarnessGivesARealPostgreSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	t.Logf("harness start-up: %v (%s)", pgtest.StartupCost(), pgtest.Describe(pgtest.Server(t)))

	var version string
	require.NoError(t, db.QueryRow(ctx, `SHOW server_version`).Scan(&version))
	require.Regexp(t, `^\d+`, version)

	_, err := db.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, n int CONSTRAINT n_positive CHECK (n > 0))`)
	require.NoError(t, err)

	_, err = db.Exec(ctx, `INSERT INTO t VALUES (1, -1)`)
	err = pg.MapError(err)
	require.ErrorIs(t, err, pg.ErrCheckViolation)
	require.Equal(t, "n_positive", pg.Constraint(err))

	_, err = db.Exec(ctx, `INSERT INTO t VALUES (1, 1)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO t VALUES (1, 2)`)
	require.ErrorIs(t, pg.MapError(err), pg.ErrUniqueViolation)
	require.Equal(t, "t_pkey", pg.Constraint(err))

	var n int
	err = db.QueryRow(ctx, `SELECT n FROM t WHERE id = 42`).Scan(&n)
	require.ErrorIs(t, pg.MapError(err), pg.ErrNotFound)
	require.ErrorIs(t, pg.MapError(err), pgx.ErrNoRows, "the driver error stays in the chain")
}

// Each test owns its database: a table made in one clone is absent from the
// next, and the schema is migrated to the embedded latest version.
func TestEachTestGetsAFreshMigratedClone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.New(t), pgtest.New(t)
	_, err := a.Exec(ctx, `CREATE TABLE only_in_a (id int)`)
	require.NoError(t, err)
	_, err = b.Exec(ctx, `SELECT 1 FROM only_in_a`)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "does not exist"), err)

	st, err := pg.ReadMigrationState(ctx, b, migrationsFS)
	require.NoError(t, err)
	require.True(t, st.Current(), "%+v", st)
}

func TestInTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`)
	require.NoError(t, err)
	boom := errors.New("boom")
	err = pg.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.Zero(t, n)
}

// A test may own a server (LIKE-03 stops and restarts it) in a process
// that has already cloned databases on the shared one: the dedicated
// server gets its own test role and template, and survives an immediate
// stop and a start on the same port. (Its sessions must ask for
// synchronous_commit to keep commits across an immediate stop: the
// test servers run with it off.)
func TestDedicatedServerBesideTheSharedOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	shared := pgtest.New(t)
	require.NoError(t, shared.Ping(ctx))

	srv := pgtest.Dedicated(t)
	db := pgtest.Pool(t, pgtest.URLOn(t, srv)+"&synchronous_commit=on", 2)
	var migrated bool
	require.NoError(t, db.QueryRow(ctx, `SELECT to_regclass('outbox_event') IS NOT NULL`).Scan(&migrated))
	require.True(t, migrated, "the clone on the dedicated server is migrated")
	_, err := db.Exec(ctx, `CREATE TABLE kept (n int)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO kept VALUES (1)`)
	require.NoError(t, err)

	require.NoError(t, srv.Stop("immediate"))
	require.Error(t, db.Ping(ctx))
	require.NoError(t, srv.Start(ctx))
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n), "the pool reconnects")
	require.Equal(t, 1, n, "a committed row survives crash recovery")
}

// A database that cannot be reached is ErrUnavailable (HTTP answers 503
// with Retry-After), not an unclassified error that would become a 500.
func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://nobody@127.0.0.1:%d/none?sslmode=disable&connect_timeout=2", pgtest.FreePort(t))
	_, err := pgx.Connect(context.Background(), url)
	require.Error(t, err)
	require.ErrorIs(t, pg.MapError(err), pg.ErrUnavailable)
	require.ErrorIs(t, pg.MapError(pg.MapError(err)), pg.ErrUnavailable, "idempotent")
}

// A pooled connection the server or a proxy has closed (HAProxy cuts the
// old primary's sessions on a failover) fails with pgconn's "conn closed":
// ErrUnavailable like any other lost connection, so HTTP answers 503.
func TestClosedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.Error(t, err)
	require.ErrorIs(t, pg.MapError(err), pg.ErrUnavailable, "%v", err)
}

// A write that reaches a node which is no longer the primary (25006
// read_only_sql_transaction) is a failover in progress: ErrUnavailable.
func TestWriteOnAReadOnlyNodeIsUnavailable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	err := pg.InTxOpts(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE t (id int)`)
		return err
	})
	require.ErrorIs(t, err, pg.ErrUnavailable)
}

// Connect takes a multi-host URL (libpq's syntax, as pgx parses it): with
// target_session_attrs=read-write it skips hosts that are down or read-only
// and lands on the primary — how a replica finds the database after a
// failover without a proxy in between.
func TestConnectThroughAMultiHostURL(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	dead := pgtest.FreePort(t)
	multi := strings.Replace(url, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port),
		fmt.Sprintf("127.0.0.1:%d,%s:%d", dead, cfg.Host, cfg.Port), 1)
	require.NotEqual(t, url, multi, "the URL names host:port")
	sep := "?"
	if strings.Contains(multi, "?") {
		sep = "&"
	}
	pool, err := pg.Connect(context.Background(), multi+sep+"target_session_attrs=read-write", pg.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	var readOnly bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT pg_is_in_recovery()`).Scan(&readOnly))
	require.False(t, readOnly)
}
