package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// invariants are this package's own: the test needs no module list.
var invariants = invariant.MustRegistry(invariant.Core, lease.Invariants)

var ctx = context.Background()

type bundle struct {
	pool   *pgxpool.Pool
	leases *lease.Manager
}

func setup(t *testing.T) bundle {
	t.Helper()
	pool := pgtest.New(t)
	return bundle{pool: pool, leases: lease.New(pool)}
}

// forceExpiry puts the lease exactly at its expiry boundary: expires_at =
// now(), so any later statement finds it expired. This is how experiments
// reach the boundary without sleeping.
func forceExpiry(t *testing.T, db pg.Querier, name string) {
	t.Helper()
	tag, err := db.Exec(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1`, name)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func grants(t *testing.T, db pg.Querier, name string) []int64 {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT fence FROM lease_grant WHERE name = $1 ORDER BY id`, name)
	require.NoError(t, err)
	fences, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return fences
}

func TestBadInputIsAnErrorNotAPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("n", lease.MaxNameLen+1)
	cases := []struct {
		name, holder string
		ttl          time.Duration
	}{
		{"", "holder-a", time.Second},
		{"report", "", time.Second},
		{"report", "holder-a", 0},
		{"report", "holder-a", -time.Second},
		{"report", "holder-a", time.Microsecond},
		{"report", "holder-a", lease.MaxTTL + time.Second},
		{long, "holder-a", time.Second},
		{"report", long, time.Second},
		{"rep\x00ort", "holder-a", time.Second},
		{"rep\xffort", "holder-a", time.Second},
	}
	for _, c := range cases {
		_, err := b.leases.Acquire(ctx, c.name, c.holder, c.ttl)
		require.ErrorIs(t, err, lease.ErrInvalid, "Acquire(%q, %q, %s)", c.name, c.holder, c.ttl)
	}

	// A lease value that was never granted is refused by every operation.
	for _, l := range []lease.Lease{
		{},
		{Name: "report", Holder: "holder-a", TTL: time.Second},             // fence 0
		{Name: "report", Holder: "holder-a", Fence: 1},                     // no TTL
		{Name: "report", Holder: "holder-a", Fence: -1, TTL: time.Second},  // negative fence
		{Name: "", Holder: "holder-a", Fence: 1, TTL: time.Second},         // no name
		{Name: "report", Holder: "", Fence: 1, TTL: -3 * time.Millisecond}, // no holder
	} {
		_, err := b.leases.Renew(ctx, l)
		require.ErrorIs(t, err, lease.ErrInvalid, "Renew(%+v)", l)
		require.ErrorIs(t, b.leases.Release(ctx, l), lease.ErrInvalid, "Release(%+v)", l)
		_, _, err = b.leases.Watch(ctx, l, 0)
		require.ErrorIs(t, err, lease.ErrInvalid, "Watch(%+v)", l)
	}
	l, err := b.leases.Acquire(ctx, "report", "holder-a", time.Second)
	require.NoError(t, err)
	for _, every := range []time.Duration{-time.Millisecond, time.Second, 2 * time.Second} {
		_, _, err := b.leases.Watch(ctx, l, every)
		require.ErrorIs(t, err, lease.ErrInvalid, "Watch every %s with ttl 1s", every)
	}
	err = pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		require.ErrorIs(t, lease.Guard(ctx, tx, "", l), lease.ErrInvalid)
		require.ErrorIs(t, lease.Guard(ctx, tx, long, l), lease.ErrInvalid)
		require.ErrorIs(t, lease.Guard(ctx, tx, "out", lease.Lease{Name: "report"}), lease.ErrInvalid)
		require.ErrorIs(t, lease.Guard(ctx, tx, "out", lease.Lease{Fence: 3}), lease.ErrInvalid)
		return nil
	})
	require.NoError(t, err)

	// Nothing but the one valid grant reached the database.
	require.Equal(t, []int64{1}, grants(t, b.pool, "report"))
	var guards int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM fence_guard`).Scan(&guards))
	require.Zero(t, guards)
	invariants.Assert(t, b.pool, "lease")
}

// LOCK-I1: every way a lease changes hands — first grant, re-take by the
// same holder, expiry, release — issues a strictly larger fence.
func TestFenceIncreasesAcrossExpiryReleaseAndRetake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const name = "report:2026-05-01"

	a1, err := b.leases.Acquire(ctx, name, "holder-a", time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, a1.Fence)

	_, err = b.leases.Acquire(ctx, name, "holder-b", time.Hour)
	require.ErrorIs(t, err, lease.ErrHeld, "a live lease is not given to another holder")

	a2, err := b.leases.Acquire(ctx, name, "holder-a", time.Hour)
	require.NoError(t, err, "the holder may re-take its own lease")
	require.Greater(t, a2.Fence, a1.Fence, "a re-take still issues a new fence")
	_, err = b.leases.Renew(ctx, a1)
	require.ErrorIs(t, err, lease.ErrLost, "the re-take invalidated the older grant")

	forceExpiry(t, b.pool, name)
	b1, err := b.leases.Acquire(ctx, name, "holder-b", time.Hour)
	require.NoError(t, err, "an expired lease goes to whoever asks")
	require.Greater(t, b1.Fence, a2.Fence)

	require.NoError(t, b.leases.Release(ctx, b1))
	b2, err := b.leases.Acquire(ctx, name, "holder-b", time.Hour)
	require.NoError(t, err, "a released lease can be taken again by its last holder")
	require.Greater(t, b2.Fence, b1.Fence)

	require.NoError(t, b.leases.Release(ctx, b2))
	a3, err := b.leases.Acquire(ctx, name, "holder-a", time.Hour)
	require.NoError(t, err)
	require.Greater(t, a3.Fence, b2.Fence)

	require.Equal(t, []int64{a1.Fence, a2.Fence, b1.Fence, b2.Fence, a3.Fence}, grants(t, b.pool, name))
	st, err := b.leases.Get(ctx, name)
	require.NoError(t, err)
	require.Equal(t, lease.State{Holder: "holder-a", Fence: a3.Fence, GrantedAt: st.GrantedAt, ExpiresAt: st.ExpiresAt, Live: true}, st)
	invariants.Assert(t, b.pool, "lease")
}

// The database decides expiry, and it decides it at an exact instant: a
// lease is live while now() < expires_at. Inside one transaction now() does
// not move, so the boundary can be set and tested to the microsecond.
func TestExpiryIsDecidedAtTheExactBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const name = "boundary"
	err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		leases := lease.New(tx)
		a, err := leases.Acquire(ctx, name, "holder-a", time.Hour)
		require.NoError(t, err)

		_, err = tx.Exec(ctx, `UPDATE lease SET expires_at = now() + interval '1 microsecond' WHERE name = $1`, name)
		require.NoError(t, err)
		_, err = leases.Acquire(ctx, name, "holder-b", time.Hour)
		require.ErrorIs(t, err, lease.ErrHeld, "one microsecond before expiry the lease is still A's")
		a, err = leases.Renew(ctx, a)
		require.NoError(t, err, "and A may still renew it")

		_, err = tx.Exec(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1`, name)
		require.NoError(t, err)
		_, err = leases.Renew(ctx, a)
		require.ErrorIs(t, err, lease.ErrLost, "at expires_at = now() the lease has expired: no renewal")
		bl, err := leases.Acquire(ctx, name, "holder-b", time.Hour)
		require.NoError(t, err, "and another holder may take it")
		require.Greater(t, bl.Fence, a.Fence)
		return nil
	})
	require.NoError(t, err)
	invariants.Assert(t, b.pool, "lease")
}

func TestRenewAndReleaseAreConditionalOnHolderAndFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const name = "conditional"
	a, err := b.leases.Acquire(ctx, name, "holder-a", time.Minute)
	require.NoError(t, err)

	renewed, err := b.leases.Renew(ctx, a)
	require.NoError(t, err)
	require.True(t, renewed.ExpiresAt.After(a.ExpiresAt), "renewal moves the expiry forward")
	require.Equal(t, a.Fence, renewed.Fence, "renewal keeps the fence")

	forged := renewed
	forged.Holder = "holder-z"
	_, err = b.leases.Renew(ctx, forged)
	require.ErrorIs(t, err, lease.ErrLost, "another holder cannot renew A's lease")
	require.ErrorIs(t, b.leases.Release(ctx, forged), lease.ErrLost, "nor release it")

	forceExpiry(t, b.pool, name)
	bl, err := b.leases.Acquire(ctx, name, "holder-b", time.Minute)
	require.NoError(t, err)
	_, err = b.leases.Renew(ctx, renewed)
	require.ErrorIs(t, err, lease.ErrLost, "A's renewal after the takeover fails")
	require.ErrorIs(t, b.leases.Release(ctx, renewed), lease.ErrLost, "A's late release does not free B's lease")
	st, err := b.leases.Get(ctx, name)
	require.NoError(t, err)
	require.True(t, st.Live)
	require.Equal(t, "holder-b", st.Holder)
	require.Equal(t, bl.Fence, st.Fence)

	require.NoError(t, b.leases.Release(ctx, bl))
	_, err = b.leases.Renew(ctx, bl)
	require.ErrorIs(t, err, lease.ErrLost, "a released lease cannot be renewed back to life")
	require.NoError(t, b.leases.Release(ctx, bl), "releasing twice is harmless")
	st, err = b.leases.Get(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Live)
	require.Equal(t, bl.Fence, st.Fence, "release keeps the fence on the row")

	_, err = b.leases.Get(ctx, "never-granted")
	require.ErrorIs(t, err, pg.ErrNotFound)
	invariants.Assert(t, b.pool, "lease")
}

// Racing acquirers of one free lease: exactly one wins, the others see
// ErrHeld, and one fence is issued.
func TestConcurrentAcquirersGetOneGrant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 16
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = b.leases.Acquire(ctx, "contended", "holder-"+string(rune('a'+i)), time.Minute)
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, lease.ErrHeld)
	}
	require.Equal(t, 1, won)
	require.Equal(t, []int64{1}, grants(t, b.pool, "contended"))
	invariants.Assert(t, b.pool, "lease")
}

func TestGuardAdmitsOnlyTheHighestFenceSeen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `CREATE TABLE protected (id int PRIMARY KEY, value text NOT NULL, fence bigint NOT NULL)`)
	require.NoError(t, err)
	write := func(l lease.Lease, value string) error {
		return pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			if err := lease.Guard(ctx, tx, "protected:1", l); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO protected VALUES (1, $1, $2)
			                        ON CONFLICT (id) DO UPDATE SET value = excluded.value, fence = excluded.fence`, value, l.Fence)
			return err
		})
	}
	read := func() (string, int64) {
		var v string
		var f int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT value, fence FROM protected WHERE id = 1`).Scan(&v, &f))
		return v, f
	}

	a, err := b.leases.Acquire(ctx, "protected", "holder-a", time.Hour)
	require.NoError(t, err)
	forceExpiry(t, b.pool, "protected")
	bl, err := b.leases.Acquire(ctx, "protected", "holder-b", time.Hour)
	require.NoError(t, err)

	require.NoError(t, write(a, "from A"), "A's expired fence is still the highest the resource has seen")
	require.NoError(t, write(bl, "from B"))
	require.NoError(t, write(bl, "from B, retried"), "an equal fence is admitted")
	err = write(a, "from A, late")
	require.ErrorIs(t, err, lease.ErrStaleFence)
	require.Contains(t, err.Error(), "has admitted fence 2")
	v, f := read()
	require.Equal(t, "from B, retried", v, "the refused write changed nothing")
	require.Equal(t, bl.Fence, f)

	other, err := b.leases.Acquire(ctx, "another-lease", "holder-c", time.Hour)
	require.NoError(t, err)
	other.Fence = 99
	require.ErrorIs(t, write(other, "from another lease"), lease.ErrOtherLease)
	v, _ = read()
	require.Equal(t, "from B, retried", v)

	var max int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT max_fence FROM fence_guard WHERE resource = 'protected:1'`).Scan(&max))
	require.Equal(t, bl.Fence, max)
}

// A rolled-back write takes its fence with it: the guard only remembers
// fences whose writes committed.
func TestGuardRollsBackWithTheWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, err := b.leases.Acquire(ctx, "rollback", "holder-a", time.Hour)
	require.NoError(t, err)
	forceExpiry(t, b.pool, "rollback")
	bl, err := b.leases.Acquire(ctx, "rollback", "holder-b", time.Hour)
	require.NoError(t, err)

	boom := errors.New("write failed")
	err = pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		require.NoError(t, lease.Guard(ctx, tx, "out", bl))
		return boom
	})
	require.ErrorIs(t, err, boom)
	err = pg.InTx(ctx, b.pool, func(tx pgx.Tx) error { return lease.Guard(ctx, tx, "out", a) })
	require.NoError(t, err, "B's fence never committed, so A's is still the highest seen")
}

func TestGrantHistoryIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.leases.Acquire(ctx, "history", "holder-a", time.Hour)
	require.NoError(t, err)
	for _, stmt := range []string{
		`UPDATE lease_grant SET fence = 0`,
		`DELETE FROM lease_grant`,
		`TRUNCATE lease_grant`,
	} {
		_, err := b.pool.Exec(ctx, stmt)
		require.ErrorIs(t, pg.MapError(err), pg.ErrRaised, stmt)
		require.Contains(t, err.Error(), "lease_grant is append-only")
	}
	require.Equal(t, []int64{1}, grants(t, b.pool, "history"))
	invariants.Assert(t, b.pool, "lease")
}

// LOCK-I1's query finds a broken history: the check can fail.
func TestLockI1DetectsADecreasingFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.leases.Acquire(ctx, "broken", "holder-a", time.Hour)
	require.NoError(t, err)
	// Bypass Acquire the way a buggy implementation would: hand out 5,
	// then a fence lower than one already issued.
	for _, fence := range []int{5, 3} {
		_, err = b.pool.Exec(ctx, `
			WITH l AS (UPDATE lease SET fence = $1 WHERE name = 'broken' RETURNING *)
			INSERT INTO lease_grant (name, holder, fence, granted_at, expires_at)
			SELECT name, holder, fence, granted_at, expires_at FROM l`, fence)
		require.NoError(t, err)
	}
	res := invariants.Run(ctx, b.pool, "LOCK-I1")
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Len(t, res[0].Rows, 2, "the decreasing grant and the lease row behind its history are reported")
}
