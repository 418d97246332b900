package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// A task that runs for twice its lease's TTL, by the database clock, keeps
// the lease throughout: the watchdog renews it every TTL/3, a competitor is
// refused every time it asks, and the fence never changes.
//
// The wait here is the claim itself (the task is long), not a stand-in for
// a boundary; the margin is two renewal intervals.
func TestWatchdogKeepsALongTaskAlive(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	leases := lease.New(pool)
	const ttl = 1200 * time.Millisecond

	l, err := leases.Acquire(ctx, "long-task", "worker-a", ttl)
	require.NoError(t, err)
	taskCtx, w, err := leases.Watch(ctx, l, 0)
	require.NoError(t, err)

	// The long task: work in small steps until the database clock is a
	// full TTL past the lease's original expiry.
	refused := 0
	for {
		require.NoError(t, taskCtx.Err(), "the task's context must stay open while the lease is renewed")
		var done bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT now() > $1::timestamptz + $2 * interval '1 microsecond'`,
			l.ExpiresAt, ttl.Microseconds()).Scan(&done))
		if done {
			break
		}
		_, err := leases.Acquire(ctx, "long-task", "worker-b", ttl)
		require.ErrorIs(t, err, lease.ErrHeld, "a competitor must never get a lease the watchdog keeps")
		refused++
		time.Sleep(50 * time.Millisecond) // the task's own pace
	}

	require.NoError(t, taskCtx.Err())
	last, err := w.Stop()
	require.NoError(t, err, "nothing was lost")
	require.ErrorIs(t, context.Cause(taskCtx), context.Canceled, "Stop ends the task's context, without a loss")
	require.GreaterOrEqual(t, w.Renewals(), 4, "renewed at TTL/3 over two TTLs")
	require.Equal(t, l.Fence, last.Fence, "renewal keeps the fence")
	require.True(t, last.ExpiresAt.After(l.ExpiresAt.Add(ttl)), "the lease now expires later than the task's original deadline")
	require.Positive(t, refused)

	st, err := leases.Get(ctx, "long-task")
	require.NoError(t, err)
	require.Equal(t, "worker-a", st.Holder)
	require.Equal(t, l.Fence, st.Fence)
	require.Len(t, grantsOf(t, pool, "long-task"), 1, "one grant, renewed; never re-acquired")
	e2etest.Assert(t, pool, "lease")
}

// When the lease is lost — taken by another holder after an expiry, or
// merely expired — the next renewal fails and the task's context is
// cancelled with ErrLost. The lease's TTL is an hour and the watchdog's
// interval 20 ms, so "promptly" is measured in renewals, not in TTLs.
func TestWatchdogCancelsOnLoss(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	leases := lease.New(pool)

	cases := []struct {
		name    string
		lose    func(t *testing.T, l lease.Lease)
		holder  string // the lease row's holder afterwards
		regrant bool   // whether a new grant moved the fence
	}{
		{"taken over", func(t *testing.T, l lease.Lease) {
			forceExpiry(t, pool, l.Name, l.Fence)
			_, err := leases.Acquire(ctx, l.Name, "worker-b", time.Hour)
			require.NoError(t, err)
		}, "worker-b", true},
		{"expired", func(t *testing.T, l lease.Lease) {
			forceExpiry(t, pool, l.Name, l.Fence)
		}, "worker-a", false},
		{"re-taken by its own holder", func(t *testing.T, l lease.Lease) {
			_, err := leases.Acquire(ctx, l.Name, l.Holder, time.Hour)
			require.NoError(t, err)
		}, "worker-a", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name := "watched:" + c.name
			l, err := leases.Acquire(ctx, name, "worker-a", time.Hour)
			require.NoError(t, err)
			taskCtx, w, err := leases.Watch(ctx, l, 20*time.Millisecond)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return w.Renewals() >= 1 }, 10*time.Second, 5*time.Millisecond,
				"the watchdog renews while the lease is held")
			require.NoError(t, taskCtx.Err())

			c.lose(t, l)
			e2etest.WaitOrTimeout(t, taskCtx.Done(), "the task's context was not cancelled after the lease was lost")
			require.ErrorIs(t, context.Cause(taskCtx), lease.ErrLost)
			_, err = w.Stop()
			require.ErrorIs(t, err, lease.ErrLost)

			st, err := leases.Get(ctx, name)
			require.NoError(t, err)
			require.Equal(t, c.holder, st.Holder)
			if c.regrant {
				require.Greater(t, st.Fence, l.Fence)
			} else {
				require.Equal(t, l.Fence, st.Fence)
				require.False(t, st.Live, "an expired lease is not renewed back to life")
			}
		})
	}
	t.Cleanup(func() { e2etest.Assert(t, pool, "lease") })
}
