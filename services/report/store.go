package report

import (
	"context"
	"fmt"
	"strings"
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

// sqlPurgeDays is report's half of the retention (report.purge,
// FENCELAB_REPORT_RETENTION, docs/DATA.md): the report_write and
// report_output rows of the days ($1) whose leases lease.PurgeTx has just
// deleted in the same transaction (with their grants and fence guards).
// Together a day goes whole or not at all: LOCK-I1 compares a name's
// grants with each other and with its lease row, LOCK-I2 a date's writes
// with each other, with that name's grants, its output row and its guard.
// A day with only part of its rows gone would be a violation (a write
// whose grant is missing); a day entirely gone is simply not there.
// Rows are reached by key (report_write_by_date, the primary key). gate
// says, for this transaction only, that report_write's append-only
// trigger may let these deletes through (migrations/0607); both deletes
// read days, which reads gate first.
const sqlPurgeDays = `
WITH gate AS MATERIALIZED (
    SELECT set_config('fencelab.report_purge', 'on', true) AS purge
), days AS MATERIALIZED (
    SELECT d FROM unnest($1::date[]) AS d, gate WHERE gate.purge = 'on'
), writes AS (
    DELETE FROM report_write WHERE report_date = ANY (ARRAY(SELECT d FROM days))
    RETURNING 1
), outputs AS (
    DELETE FROM report_output WHERE report_date = ANY (ARRAY(SELECT d FROM days))
)
SELECT count(*) FROM writes`

// purgeBatch bounds one retention statement, in report days (each one
// lease, its grants and writes, one report and one guard row).
const purgeBatch = 500

// Purge deletes, in batches of purgeBatch days, every report day past
// retention, each batch in its own transaction, and returns what went.
// lease.PurgeTx takes the report leases whose latest grant and expiry are
// both older than the retention (the one assumption that makes deleting
// a lease row safe is stated there: no holder stays paused longer than
// the retention), with their grants and guards; sqlPurgeDays then
// deletes the same days' writes and reports. Age is the grant's, not the
// report date's: experiments pin fixed dates (2026-05-01), and a day
// reported on again later is kept for as long as its newest grant. A
// report-named lease that names no real day goes with nothing else.
func Purge(ctx context.Context, db pg.TxBeginner, retention time.Duration) (Purged, error) {
	var total Purged
	for {
		var b Purged
		err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
			names, grants, err := lease.PurgeTx(ctx, tx, leasePrefix, retention, purgeBatch)
			if err != nil {
				return err
			}
			days := make([]time.Time, 0, len(names))
			for _, n := range names {
				if d, err := ParseDate(strings.TrimPrefix(n, leasePrefix)); err == nil {
					days = append(days, d)
				}
			}
			b.Days, b.Grants = int64(len(names)), grants
			return pg.MapError(tx.QueryRow(ctx, sqlPurgeDays, days).Scan(&b.Writes))
		})
		if err != nil {
			return total, fmt.Errorf("report: purge: %w", err)
		}
		total.Days += b.Days
		total.Grants += b.Grants
		total.Writes += b.Writes
		if b.Days < purgeBatch {
			return total, nil
		}
	}
}

// GrowthProbes are the module's periodic queries whose cost must not grow
// with the history (plan tests, bench growth): the purge batch examines
// its days' rows, a handful per day.
func GrowthProbes(retention time.Duration) []pg.Probe {
	return []pg.Probe{
		lease.PurgeProbe("report.purge batch (leases, grants, guards)", leasePrefix, retention, purgeBatch),
	}
}

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
		if err := lease.Guard(ctx, tx, resource(r.Date), l); err != nil {
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
