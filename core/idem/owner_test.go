package idem_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// Two processes share one database. A claims a key and stalls before its
// effect; while A's presence session lives, B's retry is 409 in flight.
// Then A's session ends (the server terminates it, as after a crash or a
// failover): B's retry takes the key over at once — the lock A took still
// has seconds to run — with a new fence, and A, waking up, runs its effect
// into a transaction whose finish is refused (IDEM-I1): one effect, B's,
// and A's client gets B's answer replayed.
func TestAKeyWhoseOwnerSessionIsGoneIsTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	direct := pgtest.Pool(t, url, 4)
	_, err := direct.Exec(ctx, demoSchema)
	require.NoError(t, err)

	presenceA := idem.NewPresence(pgtest.Pool(t, url, 0))
	t.Cleanup(presenceA.Close)
	presenceB := idem.NewPresence(pgtest.Pool(t, url, 0))
	t.Cleanup(presenceB.Close)
	a := mount(t, pgtest.Pool(t, url, 0), presenceA)
	b := mount(t, pgtest.Pool(t, url, 0), presenceB)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ownerA, err := presenceA.WaitReady(wctx)
	require.NoError(t, err)
	_, err = presenceB.WaitReady(wctx)
	require.NoError(t, err)

	const key = "k-owner-gone"
	gate := a.faults.Pause(idem.PointBeforeEffect, key)
	t.Cleanup(gate.Release)
	type result struct {
		r   reply
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := a.send(ctx, "user-0042", "/demo/accounts/user-0042/debits", key, body30)
		first <- result{r, err}
	}()
	select {
	case <-gate.Reached():
	case <-wctx.Done():
		t.Fatal("A never reached its effect")
	}

	// The record names A's presence session as its owner.
	var pid int32
	var started time.Time
	require.NoError(t, direct.QueryRow(ctx,
		`SELECT owner_pid, owner_started FROM idem_request WHERE key = $1 AND state = 'in_flight'`, key).Scan(&pid, &started))
	require.Equal(t, ownerA.PID, pid)
	require.True(t, ownerA.Started.Equal(started))

	// Owner alive, lock live: the key is busy, on either process.
	busy := b.post(t, "user-0042", key, body30)
	require.Equal(t, http.StatusConflict, busy.status, string(busy.body))
	require.Equal(t, "idempotency_key_in_flight", busy.code())

	// A's session ends. pg_terminate_backend with a timeout returns once
	// the backend has exited, so no sleep stands in for "gone".
	var terminated bool
	require.NoError(t, direct.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&terminated))
	require.True(t, terminated)
	var lockLeft time.Duration
	require.NoError(t, direct.QueryRow(ctx,
		`SELECT (EXTRACT(EPOCH FROM locked_until - now()) * 1e9)::bigint FROM idem_request WHERE key = $1`, key).Scan(&lockLeft))
	require.Greater(t, lockLeft, 5*time.Second, "the lock alone would still hold the key")
	// A's process lives on: its presence comes back as a new session, and
	// what A claims from now on names that one.
	require.Eventually(t, func() bool {
		o := presenceA.Owner()
		return o != nil && o.PID != pid
	}, 10*time.Second, 5*time.Millisecond, "A's presence reconnects")

	taken := b.post(t, "user-0042", key, body30)
	require.Equal(t, http.StatusCreated, taken.status, string(taken.body))
	require.False(t, taken.replayed())
	requireCounter(t, b.metrics, 1, "fencelab_idem_requests_total", "scope", "demo.debit", "outcome", "takeover")
	var takeovers int
	var ownerPID *int32
	require.NoError(t, direct.QueryRow(ctx,
		`SELECT takeovers, owner_pid FROM idem_request WHERE key = $1 AND state = 'done'`, key).Scan(&takeovers, &ownerPID))
	require.Equal(t, 1, takeovers)
	require.Nil(t, ownerPID, "a finished record has no owner")

	// A wakes: its effect runs, its finish finds the fence gone, and the
	// whole transaction rolls back. Its client gets B's answer.
	gate.Release()
	var res result
	select {
	case res = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("A never answered")
	}
	require.NoError(t, res.err)
	require.Equal(t, http.StatusCreated, res.r.status, string(res.r.body))
	require.True(t, res.r.replayed())
	require.Equal(t, taken.body, res.r.body)
	requireCounter(t, a.metrics, 1, "fencelab_idem_requests_total", "scope", "demo.debit", "outcome", "fence_refused")

	n, balance := a.effects(t, "user-0042", key)
	require.Equal(t, 1, n)
	require.EqualValues(t, 970, balance)
	a.assertConsistent(t)
}

// A pid names a session only with its start time: a record whose owner pid
// now belongs to another session (the pid was reused) is ownerless, and is
// taken over at once. A record claimed with no presence at all keeps its
// key until the lock expires, as before owners existed.
func TestAReusedPidDoesNotHoldAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Pool(t, url, 0)
	_, err := pool.Exec(ctx, demoSchema)
	require.NoError(t, err)
	presence := idem.NewPresence(pool)
	t.Cleanup(presence.Close)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = presence.WaitReady(wctx)
	require.NoError(t, err)
	owned := mount(t, pool, presence)
	ownerless := mount(t, pool, nil)

	stall := func(b *bundle, key string) (release func() reply) {
		gate := b.faults.Pause(idem.PointBeforeEffect, key)
		t.Cleanup(gate.Release)
		done := make(chan reply, 1)
		go func() {
			r, _ := b.send(ctx, "user-0042", "/demo/accounts/user-0042/debits", key, body30)
			done <- r
		}()
		select {
		case <-gate.Reached():
		case <-wctx.Done():
			t.Fatalf("%s never reached its effect", key)
		}
		return func() reply { gate.Release(); return <-done }
	}

	releaseReused := stall(owned, "k-reused")
	// The owner's pid stays live (the presence session is up); only the
	// start time differs, as when another session got the pid.
	tag, err := pool.Exec(ctx, `UPDATE idem_request SET owner_started = owner_started - interval '1 second'
	                             WHERE key = 'k-reused' AND owner_pid IS NOT NULL`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	r := ownerless.post(t, "user-0042", "k-reused", body30)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.True(t, releaseReused().replayed())

	releaseOwnerless := stall(ownerless, "k-ownerless")
	r = owned.post(t, "user-0042", "k-ownerless", body30)
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	require.Equal(t, "idempotency_key_in_flight", r.code())
	require.Equal(t, http.StatusCreated, releaseOwnerless().status)

	for _, k := range []string{"k-reused", "k-ownerless"} {
		n, _ := owned.effects(t, "user-0042", k)
		require.Equal(t, 1, n, k)
	}
	owned.assertConsistent(t)
}
