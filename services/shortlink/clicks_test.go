package shortlink

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
