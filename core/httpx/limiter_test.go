package httpx_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
)

// FS-R4 at the unit level: never more than Limit admitted, never more than
// WaitLine waiting, the overflow refused at once with 503, and a waiter who
// leaves does not leak a permit.
func TestLimiterBoundsAdmissionAndTheLine(t *testing.T) {
	t.Parallel()
	l := httpx.NewLimiter(httpx.LimiterOptions{Name: "t", Limit: 2, WaitLine: 1})
	ctx := context.Background()
	r1, err := l.Acquire(ctx)
	require.NoError(t, err)
	r2, err := l.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, l.InUse())

	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(ctx)
		if err == nil {
			r()
		}
		got <- err
	}()
	for l.Waiting() != 1 { // wait until the goroutine is in line (no timing assumption)
		select {
		case err := <-got:
			t.Fatalf("third caller returned early: %v", err)
		default:
			runtime.Gosched()
		}
	}
	require.Equal(t, 503, httpx.NewErrors().Problem(l.Shed()).Status, "full: shed before any work")
	_, err = l.Acquire(ctx)
	p := httpx.NewErrors().Problem(err)
	require.Equal(t, 503, p.Status)
	require.Equal(t, "overloaded", p.Code)
	require.Equal(t, 1, p.RetryAfter)

	r1()
	r1() // idempotent: must not free a second permit
	require.NoError(t, <-got)
	require.NoError(t, l.Shed(), "the line is empty again")
	r2()
	require.Equal(t, 0, l.InUse())
	require.Equal(t, 2, l.Peak())
}

func TestLimiterWaiterWhoLeavesDoesNotLeak(t *testing.T) {
	t.Parallel()
	l := httpx.NewLimiter(httpx.LimiterOptions{Name: "t", Limit: 1, WaitLine: 10})
	r, err := l.Acquire(context.Background())
	require.NoError(t, err)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Acquire(ctx)
			require.ErrorIs(t, err, context.Canceled)
		}()
	}
	for l.Waiting() != 10 {
		runtime.Gosched()
	}
	cancel()
	wg.Wait()
	require.Equal(t, 0, l.Waiting())
	r()
	require.Equal(t, 0, l.InUse())
	r2, err := l.Acquire(context.Background())
	require.NoError(t, err, "the permit came back")
	r2()
}
