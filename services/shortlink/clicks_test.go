package shortlink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// The queue between redirects and writers holds at most its limit, hands
// over full batches and gives up the partial one on request, and every
// click put is taken exactly once (SL-I4's "every click is stored or
// counted" starts here).
func TestClickQueueBoundsBatchesAndLosesNothing(t *testing.T) {
	t.Parallel()
	q := newClickQueue(1000, 64)
	const putters, each = 8, 400
	var accepted, refused, overflowed int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range putters {
		wg.Go(func() {
			for i := range each {
				full, ok := q.put(click{code: fmt.Sprintf("c%d-%d", p, i), at: time.Now()})
				mu.Lock()
				overflowed += len(full)
				if ok {
					accepted++
				} else {
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Zero(t, overflowed, "ready has room for every full batch the limit allows")
	require.Equal(t, putters*each, accepted+refused)
	require.Equal(t, 1000, accepted, "nobody takes: exactly the limit is queued")
	require.Equal(t, 1000, q.depth())

	seen := map[string]int{}
	for len(q.ready) > 0 {
		b := <-q.ready
		require.Len(t, b, 64, "only full batches are handed over")
		q.taken(len(b))
		for _, c := range b {
			seen[c.code]++
		}
		q.recycle(b)
	}
	rest := q.partial()
	require.Len(t, rest, 1000%64)
	for _, c := range rest {
		seen[c.code]++
	}
	require.Len(t, seen, 1000, "every accepted click taken once")
	for code, n := range seen {
		require.Equal(t, 1, n, code)
	}
	require.Zero(t, q.depth())
	require.Nil(t, q.partial())

	// Room again once taken; a recycled buffer is reused empty.
	_, ok := q.put(click{code: "again"})
	require.True(t, ok)
	require.Equal(t, []click{{code: "again"}}, q.partial())
}

// A batch's first attempt is a plain INSERT counted by the writer; every
// later attempt carries the same ids and stores and counts nothing twice
// (SL-I4, SL-I5) — whether or not the first one committed.
func TestClickBatchRetryAfterACommittedAttemptAddsNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	for _, code := range []string{"Abc123xy", "Zzz999qq"} {
		_, _, err := createLink(ctx, pool, code, "https://example.test/", "user-0042", false, nil)
		require.NoError(t, err)
	}
	now := time.Now()
	batch := []click{{"Zzz999qq", now}, {"Abc123xy", now}, {"Zzz999qq", now}, {"Abc123xy", now}, {"Zzz999qq", now}}
	rows := &clickRows{}
	rows.fill(batch)
	require.NoError(t, insertClicks(ctx, pool, rows, false))
	// The reply was lost: the retry sends the same ids.
	require.NoError(t, insertClicks(ctx, pool, rows, true))
	// A first attempt can never meet its own ids; if it did, the unique
	// key fails it whole and nothing is counted.
	require.Error(t, insertClicks(ctx, pool, rows, false))

	for code, want := range map[string]int64{"Abc123xy": 2, "Zzz999qq": 3} {
		st, err := readStats(ctx, pool, code)
		require.NoError(t, err)
		require.Equal(t, want, st.Clicks, code)
	}
	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM shortlink_clicks`).Scan(&stored))
	require.Equal(t, len(batch), stored)

	// A new batch gets new ids: a retry that never saw its first attempt
	// commit stores it whole.
	rows.fill(batch[:2])
	require.NoError(t, insertClicks(ctx, pool, rows, true))
	st, err := readStats(ctx, pool, "Zzz999qq")
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Clicks)
	invariants.Assert(t, pool, "shortlink")
}
