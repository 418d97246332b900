package load

import (
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
