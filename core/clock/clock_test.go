package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/clock"
)

func TestSleepPassesTheWholeDuration(t *testing.T) {
	t.Parallel()
	start := time.Now()
	require.True(t, clock.Sleep(context.Background(), 5*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond)
}

// A cancelled context ends the wait at once: an hour's sleep returns false
// without waiting.
func TestSleepEndsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, clock.Sleep(ctx, time.Hour))
}
