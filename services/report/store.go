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

// sqlPurge is the retention (report.purge, FENCELAB_REPORT_RETENTION,
// docs/DATA.md): up to $2 report days whose lease's latest grant
// (lease.granted_at) and expiry (lease.expires_at) are both more than $1
// microseconds old by the database clock are deleted whole, in this one
// statement: the lease row `report:YYYY-MM-DD`, every lease_grant row of
// that name, the day's report_write rows, its report_output row and its
// fence_guard row `report_output:YYYY-MM-DD`. Age is the grant's, not
// the report date's: experiments pin fixed dates (2026-05-01), and a day
// reported on again later is kept for as long as its newest grant.
//
// Whole days keep the invariants true over what remains: LOCK-I1 compares
// a name's grants with each other and with its lease row, LOCK-I2 a date's
// writes with each other, with that name's grants, its output row and its
// guard. A day with only part of its rows gone would be a violation (a
// write whose grant is missing, a lease row without its grants); a day
// entirely gone is simply not there.
//
// Why deleting a lease row is safe here, when migrations/0010 keeps it
// "forever" because it carries the fence: once the row is gone, the next
// Acquire of that name starts the fence again at 1, and the day's guard
// row, gone too, no longer remembers the highest fence that wrote. A
// holder still carrying an old fence of that day could then write again.
// The purge takes only days whose lease expired more than the retention
// ago (400 days by default, at least MinRetention), so the one assumption
// is that no holder stays paused, between its checks and its write, for
// longer than the retention; every other holder has long been refused or
// gone. Live leases are never touched (expires_at is in the past), and a
// day re-taken since keeps its rows, since its granted_at is recent.
//
// Oldest grant first along lease_report_granted (a partial index holding
// only report leases), FOR UPDATE SKIP LOCKED on the lease rows, so an
// Acquire of the same name waits for the purge and then inserts a fresh
// row, and two runs split the work; the day's other rows are reached by
// key (lease_grant_fence_once, report_write_by_date, the primary keys),
// so a batch examines what it deletes, never the history inside the
// window. gate says, for this transaction only, that the append-only
// triggers of lease_grant and report_write may let these deletes through
// (migrations/0607); every delete reads days, which reads gate first.
const sqlPurge = `
WITH gate AS MATERIALIZED (
    SELECT set_config('fencelab.report_purge', 'on', true) AS purge
), doomed AS MATERIALIZED (
    SELECT l.name, report_lease_day(l.name) AS day
      FROM lease l
     WHERE l.name LIKE 'report:%'
       AND l.granted_at < now() - $1::bigint * interval '1 microsecond'
       AND l.expires_at < now() - $1::bigint * interval '1 microsecond'
     ORDER BY l.granted_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), days AS MATERIALIZED (
    SELECT d.name, d.day FROM doomed d, gate WHERE gate.purge = 'on'
), writes AS (
    DELETE FROM report_write
     WHERE report_date = ANY (ARRAY(SELECT day FROM days WHERE day IS NOT NULL))
    RETURNING 1
), outputs AS (
    DELETE FROM report_output
     WHERE report_date = ANY (ARRAY(SELECT day FROM days WHERE day IS NOT NULL))
), guards AS (
    DELETE FROM fence_guard
     WHERE resource = ANY (ARRAY(SELECT 'report_output:' || to_char(day, 'YYYY-MM-DD') FROM days WHERE day IS NOT NULL))
       AND lease_name = 'report:' || substr(resource, 15)
), grants AS (
    DELETE FROM lease_grant WHERE name = ANY (ARRAY(SELECT name FROM days))
    RETURNING 1
), gone AS (
    DELETE FROM lease WHERE name = ANY (ARRAY(SELECT name FROM days))
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM grants), (SELECT count(*) FROM writes)`

// PurgeBatch bounds one retention statement, in report days (each one
// lease, its grants and writes, one report and one guard row).
const PurgeBatch = 500

// Purge deletes, in batches of PurgeBatch days, every report day past
// retention (sqlPurge), each batch in its own transaction, and returns
// what went.
func Purge(ctx context.Context, db pg.TxBeginner, retention time.Duration) (Purged, error) {
	var total Purged
	for {
		var b Purged
		err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
			return pg.MapError(tx.QueryRow(ctx, sqlPurge, retention.Microseconds(), PurgeBatch).Scan(&b.Days, &b.Grants, &b.Writes))
		})
		if err != nil {
			return total, fmt.Errorf("report: purge: %w", err)
		}
		total.Days += b.Days
		total.Grants += b.Grants
		total.Writes += b.Writes
		if b.Days < PurgeBatch {
			return total, nil
		}
	}
}

// GrowthProbes are the module's periodic queries whose cost must not grow
// with the history (plan tests, bench growth): the purge batch examines
// its days' rows, a handful per day.
func GrowthProbes(retention time.Duration) []pg.Probe {
	return []pg.Probe{
		{Name: "report.purge batch", When: pg.Periodic, SQL: sqlPurge,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch * 5)},
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
