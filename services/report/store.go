package report

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg"
)

// sqlWrite stores a day's report and appends it to the write log in one
// statement. The row's own fence is the second line of defence behind the
// guard (LOCK-I2): even a write that somehow passed the guard cannot
// replace a report written under a higher fence.
const sqlWrite = `
WITH written AS (
    INSERT INTO report_output AS o (report_date, content, written_fence, written_by, written_at)
    VALUES ($1, $2, $3, $4, now())
    ON CONFLICT (report_date) DO UPDATE SET
        content       = excluded.content,
        written_fence = excluded.written_fence,
        written_by    = excluded.written_by,
        written_at    = excluded.written_at
    WHERE o.written_fence <= excluded.written_fence
    RETURNING report_date, written_fence, written_by, written_at
), logged AS (
    INSERT INTO report_write (report_date, fence, holder, written_at)
    SELECT report_date, written_fence, written_by, written_at FROM written
)
SELECT written_at FROM written`

const sqlGet = `
SELECT report_date, content, written_fence, written_by, written_at
  FROM report_output
 WHERE report_date = $1`

const sqlExists = `SELECT EXISTS (SELECT 1 FROM report_output WHERE report_date = $1)`

// sqlToday is "today" by the database's clock and time zone, the one clock
// every instance shares.
const sqlToday = `SELECT current_date`

// sqlCompute is the report's "work": the day's lease activity.
const sqlCompute = `
SELECT count(*) FROM lease_grant
 WHERE granted_at >= $1::date AND granted_at < $1::date + 1`

// Output is the protected resource the report job writes to. Production
// uses FencedOutput. The experiments also run the job against an output
// that skips the token check, to show that no lease, however good, stops
// a stale write the resource does not refuse.
type Output interface {
	// Write stores r under l and returns it as stored, or
	// lease.ErrStaleFence when a write with a higher fence came first.
	Write(ctx context.Context, l lease.Lease, r Report) (Report, error)
}

// FencedOutput writes report_output only through lease.Guard, in the same
// transaction as the write.
type FencedOutput struct {
	DB pg.TxBeginner
}

// Write implements Output.
func (o FencedOutput) Write(ctx context.Context, l lease.Lease, r Report) (Report, error) {
	err := pg.InTx(ctx, o.DB, func(tx pgx.Tx) error {
		if err := lease.Guard(ctx, tx, Resource(r.Date), l); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, sqlWrite, r.Date, r.Content, l.Fence, l.Holder).Scan(&r.WrittenAt)
		if err = pg.MapError(err); err != nil {
			if isNoRows(err) {
				return fmt.Errorf("%w: report_output for %s holds a higher fence than %d", lease.ErrStaleFence, r.Date.Format(DateLayout), l.Fence)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	r.Fence, r.WrittenBy = l.Fence, l.Holder
	return r, nil
}

func get(ctx context.Context, db pg.Querier, day time.Time) (Report, error) {
	var r Report
	err := db.QueryRow(ctx, sqlGet, day).Scan(&r.Date, &r.Content, &r.Fence, &r.WrittenBy, &r.WrittenAt)
	if err = pg.MapError(err); err != nil {
		if isNoRows(err) {
			return Report{}, fmt.Errorf("%w: %s", ErrNoReport, day.Format(DateLayout))
		}
		return Report{}, fmt.Errorf("report: get %s: %w", day.Format(DateLayout), err)
	}
	return r, nil
}

func exists(ctx context.Context, db pg.Querier, day time.Time) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, sqlExists, day).Scan(&ok)
	return ok, pg.MapError(err)
}

func today(ctx context.Context, db pg.Querier) (time.Time, error) {
	var d time.Time
	err := db.QueryRow(ctx, sqlToday).Scan(&d)
	return d, pg.MapError(err)
}

func grantsOn(ctx context.Context, db pg.Querier, day time.Time) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, sqlCompute, day).Scan(&n)
	return n, pg.MapError(err)
}
