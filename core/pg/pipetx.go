package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Deferrer is a transaction that can hold back a statement whose result
// nobody reads and send it with its next round trip (PipeTx does). A
// deferred statement's error surfaces from that next call — a later
// statement or the COMMIT — and fails the transaction like any other.
type Deferrer interface {
	Defer(sql string, args ...any)
}

// ExecOrDefer runs sql in tx now, or defers it when tx can (Deferrer):
// for writes whose result the caller does not need.
func ExecOrDefer(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	if d, ok := tx.(Deferrer); ok {
		d.Defer(sql, args...)
		return nil
	}
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

// InPipelinedTx is InTx for a request's hot path: the same transaction in
// fewer round trips. BEGIN travels with the first statement instead of
// taking a round trip of its own, statements fn defers (Deferrer) travel
// with the next one, and the last of them travel with the COMMIT. A
// transaction whose fn ran no statement costs no round trip at all.
//
// Everything fn sends still runs in one transaction, in the order fn sent
// it, under READ COMMITTED: only the waiting is saved. The price is where a
// deferred statement's error shows up — at the next call, not at Defer —
// so fn defers only statements whose failure should fail the transaction
// as a whole. The returned error is mapped through MapError.
func InPipelinedTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx *PipeTx) error) (err error) {
	tx := &PipeTx{pool: pool}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return MapError(err)
	}
	return MapError(tx.Commit(ctx))
}

// PipeTx is the transaction InPipelinedTx hands to fn. It is a pgx.Tx: code
// written for one works unchanged, and only QueryRow, Exec and Commit
// carry the BEGIN or deferred statements along; any other first call
// begins in a round trip of its own. LargeObjects is not supported.
type PipeTx struct {
	pool     *pgxpool.Pool
	conn     *pgxpool.Conn
	tx       pgx.Tx // the begun transaction; nil before the first round trip
	deferred []*pgx.QueuedQuery
	closed   bool
}

var _ pgx.Tx = (*PipeTx)(nil)

// Defer queues sql to be sent with the transaction's next round trip.
func (t *PipeTx) Defer(sql string, args ...any) {
	t.deferred = append(t.deferred, &pgx.QueuedQuery{SQL: sql, Arguments: args})
}

// batch returns a batch that begins the transaction (if not begun yet) and
// carries the deferred statements; the caller queues its own after them.
func (t *PipeTx) batch() *pgx.Batch {
	b := &pgx.Batch{}
	if t.tx == nil {
		b.BeginTx(pgx.TxOptions{})
	}
	for _, q := range t.deferred {
		b.Queue(q.SQL, q.Arguments...)
	}
	t.deferred = nil
	return b
}

// send sends b on the transaction's connection (acquiring it first) and
// reads the results of BEGIN and of the deferred statements, the first
// ahead of the caller's own. On success the caller reads its results from
// br and closes it.
func (t *PipeTx) send(ctx context.Context, b *pgx.Batch, own int) (pgx.BatchResults, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	if t.conn == nil {
		c, err := t.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		t.conn = c
	}
	var br pgx.BatchResults
	begins := t.tx == nil
	if begins {
		br = t.conn.SendBatch(ctx, b)
		t.tx = br.Tx()
	} else {
		br = t.tx.SendBatch(ctx, b)
	}
	for i := range len(b.QueuedQueries) - own {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			if i == 0 && begins {
				return nil, err
			}
			return nil, fmt.Errorf("pg: deferred statement: %w", err)
		}
	}
	return br, nil
}

// begin makes sure the transaction has begun and nothing is deferred.
func (t *PipeTx) begin(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if t.tx != nil && len(t.deferred) == 0 {
		return nil
	}
	br, err := t.send(ctx, t.batch(), 0)
	if err != nil {
		return err
	}
	return br.Close()
}

// QueryRow sends sql with BEGIN and the deferred statements, in one round
// trip.
func (t *PipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	b := t.batch()
	b.Queue(sql, args...)
	br, err := t.send(ctx, b, 1)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br}
}

// Exec sends sql with BEGIN and the deferred statements, in one round trip.
func (t *PipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := t.batch()
	b.Queue(sql, args...)
	br, err := t.send(ctx, b, 1)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Commit sends the deferred statements and COMMIT in one round trip (BEGIN
// too, if nothing was sent yet; nothing at all if nothing was ever queued).
func (t *PipeTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if t.tx == nil && len(t.deferred) == 0 {
		t.close()
		return nil
	}
	b := t.batch()
	b.Queue("COMMIT")
	br, err := t.send(ctx, b, 1)
	if err != nil {
		t.finish(ctx) // a deferred statement failed: the COMMIT was skipped
		return err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	t.finish(ctx)
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	return err
}

// Rollback ends the transaction; before its first round trip it costs
// none. Safe to call after Commit (it returns ErrTxClosed then).
func (t *PipeTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.deferred = nil
	t.finish(ctx)
	return nil
}

// finish rolls back whatever the connection still has open and returns it
// to the pool. A connection that cannot be brought back to idle is closed
// rather than reused.
func (t *PipeTx) finish(ctx context.Context) {
	if t.conn != nil && t.conn.Conn().PgConn().TxStatus() != 'I' && !t.conn.Conn().IsClosed() {
		if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
			_ = t.conn.Conn().Close(ctx)
		}
	}
	t.close()
}

func (t *PipeTx) close() {
	t.closed = true
	if t.conn != nil {
		t.conn.Release() // destroys a connection left outside idle
		t.conn = nil
	}
}

// Begin starts a savepoint, as pgx's nested transactions do.
func (t *PipeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// Query begins (with the deferred statements) in a round trip of its own,
// then queries.
func (t *PipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// SendBatch begins (with the deferred statements), then sends b.
func (t *PipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.begin(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

// CopyFrom begins (with the deferred statements), then copies.
func (t *PipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

// Prepare begins (with the deferred statements), then prepares.
func (t *PipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// LargeObjects is not supported on a PipeTx.
func (t *PipeTx) LargeObjects() pgx.LargeObjects {
	panic("pg: LargeObjects on a PipeTx; use pg.InTx")
}

// Conn returns the transaction's connection, beginning it if need be.
func (t *PipeTx) Conn() *pgx.Conn {
	if err := t.begin(context.Background()); err != nil {
		return nil
	}
	return t.tx.Conn()
}

// batchRow is the caller's row of a batch: scanning it reads the rest of
// the batch.
type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
