package claim_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
)

// goroutinesIn counts live goroutines whose stack mentions fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// Issue 20 item 7: a handler that ignores its context overruns the grace
// period. Work still returns within that one grace (not grace plus a
// second), and its pipelines stop with it instead of waiting forever on
// a channel nobody closes. The handler, when it finally returns, finds
// nobody to hand its result to and leaves the job to lapse: no panic, no
// goroutine left behind, the job still claimed (recovery reruns it).
//
// Not parallel: it counts the package's pool goroutines.
func TestOverrunningHandlersDoNotOutliveOneGrace(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	stubborn := func(ctx context.Context, j *claim.Job) error {
		close(started)
		<-release // ignores ctx on purpose
		return nil
	}
	b := setup(t, claim.Kind{Name: "t.stubborn", Handle: stubborn})
	_, _, err := b.c.Enqueue(context.Background(), b.pool, claim.NewJob{Kind: "t.stubborn", BusinessKey: "k"})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	const grace = 2 * time.Second
	returned := make(chan struct{})
	go func() {
		_ = b.c.Work(ctx, claim.PoolOptions{Workers: 2, ShutdownGrace: grace, NoListen: true})
		close(returned)
	}()
	<-started
	cancelled := time.Now()
	cancel()
	var took time.Duration
	select {
	case <-returned:
		took = time.Since(cancelled)
	case <-time.After(4 * grace):
		close(release)
		t.Fatal("Work did not return after the grace period")
	}
	require.Less(t, took, grace+grace/2, "one grace, not grace plus another second")
	require.Eventually(t, func() bool { return goroutinesIn("(*pool).cycle") == 0 },
		5*time.Second, 10*time.Millisecond, "pipelines must stop with Work")

	close(release) // the late handler returns: it must neither panic nor block
	require.Eventually(t, func() bool { return goroutinesIn("(*pool).run") == 0 },
		5*time.Second, 10*time.Millisecond, "the late handler's worker must exit")
	var state string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT state FROM job`).Scan(&state))
	require.Equal(t, "running", state, "not completed by an abandoned pool: its lease lapses")
	invariants.Assert(t, b.pool, "claim")
}
