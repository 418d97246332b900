package pg_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// countingPool is a one-connection pool that counts the round trips its
// connection makes: pgx writes a whole pipeline with one write and then
// waits for the answers, so writes after connecting are round trips.
type countingPool struct {
	*pgxpool.Pool
	writes atomic.Int64
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) { c.n.Add(1); return c.Conn.Write(b) }

func newCountingPool(t *testing.T) *countingPool {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cp := &countingPool{}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &cp.writes}, nil
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cp.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cp.Close)
	_, err = cp.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL CONSTRAINT n_positive CHECK (n > 0))`)
	require.NoError(t, err)
	return cp
}

func (cp *countingPool) roundTrips(t *testing.T, fn func()) int64 {
	t.Helper()
	before := cp.writes.Load()
	fn()
	return cp.writes.Load() - before
}

func (cp *countingPool) rows(t *testing.T) map[int]int {
	t.Helper()
	rows, err := cp.Query(context.Background(), `SELECT id, n FROM t`)
	require.NoError(t, err)
	out := map[int]int{}
	for rows.Next() {
		var id, n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// The same three writes (insert returning a value, insert, update) as a
// plain transaction take five round trips; pipelined they take two — BEGIN with
// the first statement, the deferred ones with the COMMIT — and commit the
// same rows.
func TestPipelinedTxCommitsTheSameWorkInTwoRoundTrips(t *testing.T) {
	t.Parallel()
	cp := newCountingPool(t)
	ctx := context.Background()
	work := func(tx pgx.Tx, id int, deferred bool) error {
		var n int
		if err := tx.QueryRow(ctx, `INSERT INTO t (id, n) VALUES ($1, $2) RETURNING n`, id, 1).Scan(&n); err != nil {
			return err
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO t (id, n) VALUES ($1, $2)`, []any{id + 1, n}},
			{`UPDATE t SET n = n + $2 WHERE id = $1`, []any{id + 1, 1}},
		} {
			if deferred {
				if err := pg.ExecOrDefer(ctx, tx, q.sql, q.args...); err != nil {
					return err
				}
			} else if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	}
	// Warm the statement cache: a statement's first use on a connection
	// costs one more round trip (its Prepare), once.
	require.NoError(t, pg.InTx(ctx, cp.Pool, func(tx pgx.Tx) error { return work(tx, 100, false) }))
	require.NoError(t, pg.InPipelinedTx(ctx, cp.Pool, func(tx *pg.PipeTx) error { return work(tx, 200, true) }))
	require.NoError(t, pg.InTx(ctx, cp.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM t`)
		return err
	}))
	plain := cp.roundTrips(t, func() {
		require.NoError(t, pg.InTx(ctx, cp.Pool, func(tx pgx.Tx) error { return work(tx, 10, false) }))
	})
	piped := cp.roundTrips(t, func() {
		require.NoError(t, pg.InPipelinedTx(ctx, cp.Pool, func(tx *pg.PipeTx) error { return work(tx, 20, true) }))
	})
	require.EqualValues(t, 5, plain, "BEGIN, three statements, COMMIT")
	require.EqualValues(t, 2, piped, "BEGIN+insert, deferred+COMMIT")
	require.Equal(t, map[int]int{10: 1, 11: 2, 20: 1, 21: 2}, cp.rows(t))

	empty := cp.roundTrips(t, func() {
		require.NoError(t, pg.InPipelinedTx(ctx, cp.Pool, func(tx *pg.PipeTx) error { return nil }))
	})
	require.EqualValues(t, 0, empty, "a transaction that sent nothing costs nothing")
}

// A deferred statement that fails fails the COMMIT it travels with: the
// server skips the rest of the pipeline, nothing of the transaction is
// kept — not even the statements that ran before it — and the connection
// goes back to the pool usable.
func TestPipelinedTxDeferredFailureRollsBackEverything(t *testing.T) {
	t.Parallel()
	cp := newCountingPool(t)
	ctx := context.Background()
	err := pg.InPipelinedTx(ctx, cp.Pool, func(tx *pg.PipeTx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO t (id, n) VALUES ($1, $2)`, 1, 1); err != nil {
			return err
		}
		tx.Defer(`INSERT INTO t (id, n) VALUES ($1, $2)`, 2, 1)
		tx.Defer(`INSERT INTO t (id, n) VALUES ($1, $2)`, 3, -1) // n_positive
		tx.Defer(`INSERT INTO t (id, n) VALUES ($1, $2)`, 4, 1)
		return nil
	})
	require.ErrorIs(t, err, pg.ErrCheckViolation)
	require.Equal(t, "n_positive", pg.Constraint(err))
	require.Empty(t, cp.rows(t))

	// A statement that refuses on purpose (pg.Refused) does the same.
	err = pg.InPipelinedTx(ctx, cp.Pool, func(tx *pg.PipeTx) error {
		tx.Defer(`INSERT INTO t (id, n) VALUES ($1, $2)`, 5, 1)
		tx.Defer(`
WITH changed AS (UPDATE t SET n = n + 1 WHERE id = $1 RETURNING 1)
SELECT CASE n WHEN 1 THEN n ELSE ('test: no such row, changed: ' || n)::int END
  FROM (SELECT count(*)::int AS n FROM changed) f`, 99)
		return nil
	})
	require.True(t, pg.Refused(err, "test: no such row"), "%v", err)
	require.False(t, pg.Refused(err, "other marker"))
	require.Empty(t, cp.rows(t))

	// The one connection is idle and in the pool again.
	require.NoError(t, pg.InPipelinedTx(ctx, cp.Pool, func(tx *pg.PipeTx) error {
		tx.Defer(`INSERT INTO t (id, n) VALUES ($1, $2)`, 6, 1)
		return nil
	}))
	require.Equal(t, map[int]int{6: 1}, cp.rows(t))
	require.EqualValues(t, 1, cp.Stat().TotalConns())
}

// A Named statement is pgx.NamedArgs' rewrite done once: the same $n
// statement, the arguments in its order, names in literals left alone.
func TestNamedIsNamedArgsRewrittenOnce(t *testing.T) {
	t.Parallel()
	const sql = `SELECT @b::int + @a::int, '@not_a_param', @b::int -- @nor_this`
	n := pg.MustNamed(sql)
	args := pgx.NamedArgs{"a": 1, "b": 2}
	want, wantArgs, err := args.RewriteQuery(context.Background(), nil, sql, nil)
	require.NoError(t, err)
	require.Equal(t, want, n.SQL)
	require.Equal(t, wantArgs, n.Args(args))
	require.Equal(t, []any{nil, 1}, n.Args(pgx.NamedArgs{"a": 1}), "a missing name is NULL")
}
