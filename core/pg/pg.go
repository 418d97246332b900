// Package pg holds the PostgreSQL plumbing every module shares: the pool, the
// transaction helper and the one place where driver errors become sentinels.
package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultMaxConns is a conservative per-process ceiling: the connection budget is workers × MaxConns ≤ what the database
// allows this service, so raising it is a capacity decision, not a default.
const DefaultMaxConns = 12

// PoolOptions configure Connect. Zero values take the defaults.
type PoolOptions struct {
	MaxConns        int32
	MinConns        int32
	ApplicationName string
	// ConnectTimeout bounds each new connection; a dead database must fail
	// fast rather than hang a request.
	ConnectTimeout time.Duration
	// Tracer observes every query and batch on the pool's connections
	// (benchmarks count round trips with it); nil: none.
	Tracer pgx.QueryTracer
}

// Connect opens a pgx pool and pings it once so a bad URL fails here, not on
// the first request.
func Connect(ctx context.Context, url string, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pg: parse database url: %w", err)
	}
	cfg.MaxConns = DefaultMaxConns
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if o.MinConns > 0 {
		cfg.MinConns = o.MinConns
	}
	if o.ApplicationName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = o.ApplicationName
	}
	// JIT compilation off unless the URL asks for it (…?jit=on): every
	// query here is short and index-bounded, and a generic plan's cost
	// estimate (a lag count capped at 100,000 rows) can cross
	// jit_above_cost, so a 1 ms scrape spent seconds compiling on a busy
	// machine — past the collectors' 2 s timeout (docs/DATA.md).
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if o.Tracer != nil {
		cfg.ConnConfig.Tracer = o.Tracer
	}
	if o.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pg: open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pg: ping %s: %w", redact(cfg.ConnConfig), err)
	}
	return pool, nil
}

func redact(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

// Querier is what both a pool and a transaction offer; store functions take
// it so the caller decides the transaction boundary.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxBeginner is a pool or a connection.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in one transaction: commit when fn returns nil, roll back
// otherwise (and on panic). The returned error is mapped through MapError.
func InTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error) error {
	return MapError(pgx.BeginFunc(ctx, db, fn))
}

// InTxOpts is InTx with explicit options (isolation level, read only).
func InTxOpts(ctx context.Context, db interface {
	BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error)
}, o pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	return MapError(pgx.BeginTxFunc(ctx, db, o, fn))
}

// CloneStrategy is the clause a CREATE DATABASE … TEMPLATE for a throwaway
// database ends with on a server of this version (server_version_num):
// " STRATEGY FILE_COPY" from PostgreSQL 15, where the default, WAL_LOG,
// copies the template block by block through the WAL. Copying the files
// is cheaper for the small, migrated templates the lab and the tests clone
// by the hundred (measured: 21 ms a clone against 57 ms); older servers
// only copy files, and know no STRATEGY.
func CloneStrategy(serverVersionNum int) string {
	if serverVersionNum >= 150000 {
		return " STRATEGY FILE_COPY"
	}
	return ""
}
