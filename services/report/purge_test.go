package report

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var invariants = invariant.MustRegistry(invariant.Core, lease.Invariants, Invariants)

func day(s string) time.Time {
	d, err := ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

// count runs a count(*) query.
func count(t *testing.T, db pg.Querier, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// dayRows is every row a report day has, table by table, in the order
// lease, lease_grant, report_write, report_output, fence_guard.
func dayRows(t *testing.T, db pg.Querier, d time.Time) [5]int64 {
	t.Helper()
	name, res := LeaseName(d), resource(d)
	return [5]int64{
		count(t, db, `SELECT count(*) FROM lease WHERE name = $1`, name),
		count(t, db, `SELECT count(*) FROM lease_grant WHERE name = $1`, name),
		count(t, db, `SELECT count(*) FROM report_write WHERE report_date = $1`, d),
		count(t, db, `SELECT count(*) FROM report_output WHERE report_date = $1`, d),
		count(t, db, `SELECT count(*) FROM fence_guard WHERE resource = $1`, res),
	}
}

// age moves a lease's latest grant and its expiry to the given ages by
// the database clock (lease has no append-only trigger: only its history
// tables do). This is how the test reaches the retention boundary without
// waiting for it.
func age(t *testing.T, db pg.Querier, name string, granted, expires time.Duration) {
	t.Helper()
	tag, err := db.Exec(context.Background(), `
UPDATE lease SET granted_at = now() - $2::bigint * interval '1 microsecond',
                 expires_at = now() - $3::bigint * interval '1 microsecond'
 WHERE name = $1`, name, granted.Microseconds(), expires.Microseconds())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), name)
}

func newService(t *testing.T, pool *pgxpool.Pool, holder string) *Service {
	t.Helper()
	svc, err := NewService(app.Standalone(pool), Config{Holder: holder, TTL: time.Hour})
	require.NoError(t, err)
	return svc
}

// report.purge (FENCELAB_REPORT_RETENTION): a day whose lease's latest
// grant and expiry are both past the retention goes whole — lease, every
// grant, every write, the report and its guard — and nothing else does:
// not a day granted recently (whatever its date), not a day whose lease
// was renewed past the cutoff or is still live, not a lease of another
// name. Outside the purge, the histories stay append-only. LOCK-I1 and
// LOCK-I2 hold over what remains, and a purged day reported again starts
// its fence at 1 and is judged on its own.
func TestRetentionPurgesWholeOldReportDaysOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	a, b := newService(t, pool, "worker-a"), newService(t, pool, "worker-b")
	leases := lease.New(pool)
	retention := defaultRetention
	past := retention + time.Hour

	// old1: one grant, one write. old2: two grants and two writes (the
	// second holder rewrote it under a higher fence).
	old1, old2 := day("2024-03-01"), day("2024-03-02")
	_, err := a.Run(ctx, old1)
	require.NoError(t, err)
	l1, err := leases.Acquire(ctx, LeaseName(old2), "worker-a", time.Hour)
	require.NoError(t, err)
	_, err = FencedOutput{DB: pool}.Write(ctx, l1, Report{Date: old2, Content: "first"})
	require.NoError(t, err)
	require.NoError(t, leases.Release(ctx, l1))
	l2, err := leases.Acquire(ctx, LeaseName(old2), "worker-b", time.Hour)
	require.NoError(t, err)
	_, err = FencedOutput{DB: pool}.Write(ctx, l2, Report{Date: old2, Content: "second"})
	require.NoError(t, err)
	require.NoError(t, leases.Release(ctx, l2))
	require.Equal(t, [5]int64{1, 2, 2, 1, 1}, dayRows(t, pool, old2))

	// Kept: a pinned experiment date and an old date, both granted now
	// (age is the grant's, not the date's); a day granted long ago whose
	// lease expired only recently (renewed); a day whose lease is live;
	// a lease that is not a report's.
	pinned, oldDate, renewed, live := day("2026-05-01"), day("2001-01-01"), day("2024-03-03"), day("2024-03-04")
	for _, d := range []time.Time{pinned, oldDate, renewed, live} {
		_, err := b.Run(ctx, d)
		require.NoError(t, err)
	}
	_, err = leases.Acquire(ctx, "long-task", "worker-a", time.Hour)
	require.NoError(t, err)

	// Inside the retention nothing goes.
	p, err := Purge(ctx, pool, retention)
	require.NoError(t, err)
	require.Zero(t, p)

	// Past it, by SQL at the boundary (not by waiting).
	age(t, pool, LeaseName(old1), past, past)
	age(t, pool, LeaseName(old2), past+time.Hour, past)
	age(t, pool, LeaseName(renewed), past, retention-time.Hour)
	age(t, pool, LeaseName(live), past, -time.Hour)
	age(t, pool, "long-task", past, past)

	// The append-only rule outside the purge's own statement: no DELETE
	// without the gate, and no TRUNCATE or UPDATE even with it.
	_, err = pool.Exec(ctx, `DELETE FROM lease_grant WHERE name = $1`, LeaseName(old1))
	require.ErrorContains(t, err, "append-only")
	_, err = pool.Exec(ctx, `DELETE FROM report_write WHERE report_date = $1`, old1)
	require.ErrorContains(t, err, "append-only")
	for _, stmt := range []string{`TRUNCATE report_write`, `TRUNCATE lease_grant CASCADE`,
		`UPDATE report_write SET fence = fence + 1`, `UPDATE lease_grant SET fence = fence + 1`} {
		err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('fencelab.report_purge', 'on', true), set_config('fencelab.lease_purge', 'on', true)`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, stmt)
			return err
		})
		require.ErrorContains(t, err, "append-only", stmt)
	}
	// Each owner's gate opens its own table only: report's does not let a
	// grant go, nor the lease library's a report write.
	for gate, stmt := range map[string]string{
		"fencelab.report_purge": `DELETE FROM lease_grant WHERE name = '` + LeaseName(old1) + `'`,
		"fencelab.lease_purge":  `DELETE FROM report_write WHERE report_date = '` + old1.Format(DateLayout) + `'`,
	} {
		err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config($1, 'on', true)`, gate); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, stmt)
			return err
		})
		require.ErrorContains(t, err, "append-only", stmt)
	}
	require.Equal(t, [5]int64{1, 1, 1, 1, 1}, dayRows(t, pool, old1), "nothing went outside the purge")

	p, err = Purge(ctx, pool, retention)
	require.NoError(t, err)
	require.Equal(t, Purged{Days: 2, Grants: 3, Writes: 3}, p)
	for _, d := range []time.Time{old1, old2} {
		require.Equal(t, [5]int64{}, dayRows(t, pool, d), "%s went whole", d.Format(DateLayout))
	}
	for _, d := range []time.Time{pinned, oldDate, renewed, live} {
		require.Equal(t, [5]int64{1, 1, 1, 1, 1}, dayRows(t, pool, d), "%s is kept", d.Format(DateLayout))
	}
	require.EqualValues(t, 1, count(t, pool, `SELECT count(*) FROM lease_grant WHERE name = 'long-task'`), "only report leases are purged")
	invariants.Assert(t, pool, "LOCK-I1", "LOCK-I2")

	// Nothing is left to purge; the gate was the purge's transaction's
	// only: a later DELETE is refused again.
	p, err = Purge(ctx, pool, retention)
	require.NoError(t, err)
	require.Zero(t, p)
	_, err = pool.Exec(ctx, `DELETE FROM report_write WHERE report_date = $1`, pinned)
	require.ErrorContains(t, err, "append-only")

	// A purged day reported again is a new day: its fence restarts at 1
	// (the assumption sqlPurge states: no holder of its old fences is
	// still paused), and LOCK-I1/I2 judge it on its own rows.
	again, err := a.Run(ctx, old2)
	require.NoError(t, err)
	require.EqualValues(t, 1, again.Fence)
	require.Equal(t, [5]int64{1, 1, 1, 1, 1}, dayRows(t, pool, old2))
	invariants.Assert(t, pool, "LOCK-I1", "LOCK-I2")
}

// A lease named like a report's but naming no real day (only a test can
// take one) goes with its grants and does not stop the purge.
func TestRetentionPurgesAReportLeaseThatNamesNoDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	leases := lease.New(pool)
	past := defaultRetention + time.Hour
	for _, name := range []string{"report:2026-02-30", "report:someday", "report:0000-01-01"} {
		_, err := leases.Acquire(ctx, name, "worker-a", time.Hour)
		require.NoError(t, err)
		age(t, pool, name, past, past)
	}
	p, err := Purge(ctx, pool, defaultRetention)
	require.NoError(t, err)
	require.Equal(t, Purged{Days: 3, Grants: 3}, p)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM lease`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM lease_grant`))
	invariants.Assert(t, pool, "LOCK-I1", "LOCK-I2")
}

// The module runs the retention as the periodic claim kind report.purge
// with the configured retention: one slot's job, claimed and executed,
// deletes the old day and records what it deleted as its result.
func TestTheModuleRunsThePurgeAsAPeriodicKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	d := app.Standalone(pool)
	d.Config.Settings = map[string]string{envRetention: "720h"}
	d.Jobs = claim.NewClient(pool, claim.Options{})
	rt, err := Module().Build(d)
	require.NoError(t, err)
	require.NoError(t, d.Jobs.Register(rt.Kinds...))
	k, ok := d.Jobs.Kind(purgeKindName)
	require.True(t, ok, "report.purge is registered")
	require.Positive(t, k.Every, "report.purge is periodic")

	old, kept := day("2025-01-01"), day("2025-01-02")
	svc := newService(t, pool, "worker-a")
	for _, x := range []time.Time{old, kept} {
		_, err := svc.Run(ctx, x)
		require.NoError(t, err)
	}
	// Past the configured 30 days, and inside the 400-day default: only
	// the setting makes it purgeable.
	age(t, pool, LeaseName(old), 31*24*time.Hour, 31*24*time.Hour)
	age(t, pool, LeaseName(kept), 29*24*time.Hour, 29*24*time.Hour)

	_, _, err = d.Jobs.Enqueue(ctx, pool, claim.NewJob{Kind: purgeKindName, BusinessKey: "every:0"})
	require.NoError(t, err)
	jobs, err := d.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{purgeKindName}})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, d.Jobs.Execute(ctx, jobs[0]))
	j, _, err := d.Jobs.Get(ctx, jobs[0].ID, 0)
	require.NoError(t, err)
	require.Equal(t, claim.StateSucceeded, j.State)
	require.JSONEq(t, `{"days":1,"grants":1,"writes":1}`, string(j.Result))
	require.Equal(t, [5]int64{}, dayRows(t, pool, old))
	require.Equal(t, [5]int64{1, 1, 1, 1, 1}, dayRows(t, pool, kept))
	invariants.Assert(t, pool, "LOCK-I1", "LOCK-I2")
}
