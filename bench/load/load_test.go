package load

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLatenciesQuantilesWithinThreeDigits(t *testing.T) {
	l := NewLatencies()
	for i := 1; i <= 1000; i++ {
		l.Record(time.Duration(i) * time.Millisecond)
	}
	require.EqualValues(t, 1000, l.Count())
	require.InDelta(t, 500, Ms(l.Quantile(0.5)), 1)
	require.InDelta(t, 990, Ms(l.Quantile(0.99)), 1)
	require.InDelta(t, 1000, Ms(l.Quantile(1)), 1)
	o := Of([]time.Duration{2 * time.Second})
	l.Merge(o)
	require.EqualValues(t, 1001, l.Count())
	require.InDelta(t, 2000, Ms(l.Quantile(1)), 2)
	require.Zero(t, NewLatencies().Quantile(0.99))
}

// The open loop keeps offering calls while earlier ones hang: each call's
// due time is the schedule's (the seeded Poisson gaps), not the previous
// answer's, and calls beyond the in-flight bound are counted as missed
// rather than queued.
func TestOpenLoopOffersOnScheduleAndCountsWhatItCannotStart(t *testing.T) {
	const rate, bound = 2000.0, 5
	var mu sync.Mutex
	due := map[int]time.Time{}
	_, missed := OpenLoop(context.Background(), rate, 50*time.Millisecond, bound, rand.New(rand.NewPCG(7, 7)),
		func(ctx context.Context, i int, d time.Time) {
			mu.Lock()
			due[i] = d
			mu.Unlock()
			<-ctx.Done() // every call hangs until the time is up
		})
	require.Len(t, due, bound, "only the first calls find a free slot")
	gaps := rand.New(rand.NewPCG(7, 7))
	gaps.ExpFloat64() // the gap before call 0
	for i := 1; i < bound; i++ {
		want := time.Duration(gaps.ExpFloat64() / rate * float64(time.Second))
		require.Equal(t, want, due[i].Sub(due[i-1]), "call %d is due on the schedule", i)
	}
	require.Positive(t, missed, "calls kept coming due while every slot hung")
}

func TestMedianLeavesItsInputAsItIs(t *testing.T) {
	v := []float64{3, 1, 2}
	require.EqualValues(t, 2, Median(v))
	require.Equal(t, []float64{3, 1, 2}, v)
	require.EqualValues(t, 2.5, Median([]float64{4, 1, 3, 2}), "of an even count, the mean of the two middle values")
	require.Zero(t, Median(nil))
}
