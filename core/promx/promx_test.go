package promx_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/promx"
)

func newVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "promx_test_total", Help: "test"}, []string{"k"})
}

// Two instances on one registry share one series; instances on separate
// registries (two tests, two processes) do not see each other's counts.
func TestRegisterSharesWithinARegistryOnly(t *testing.T) {
	reg, other := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := promx.Register(reg, newVec())
	b := promx.Register(reg, newVec())
	c := promx.Register(other, newVec())
	a.WithLabelValues("x").Inc()
	b.WithLabelValues("x").Add(2)
	c.WithLabelValues("x").Add(10)

	v, ok, err := promx.Value(reg, "promx_test_total", "k", "x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3.0, v)
	v, _, err = promx.Value(other, "promx_test_total", "k", "x")
	require.NoError(t, err)
	require.Equal(t, 10.0, v)
	_, ok, err = promx.Value(reg, "promx_test_total", "k", "y")
	require.NoError(t, err)
	require.False(t, ok, "no sample carries k=y")

	// Unregistered: counted, exported nowhere.
	d := promx.Register(nil, newVec())
	d.WithLabelValues("x").Inc()
	v, _, _ = promx.Value(reg, "promx_test_total", "k", "x")
	require.Equal(t, 3.0, v)
}

// The same name with other labels is a programming mistake, refused loudly.
func TestRegisterPanicsOnAConflictingSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	promx.Register(reg, newVec())
	require.Panics(t, func() {
		promx.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "promx_test_total", Help: "test"}, []string{"other"}))
	})
}

// The declaring helpers register what they say, share within a registry as
// Register does, and a gauge is read when scraped.
func TestDeclaringHelpersRegisterAndShare(t *testing.T) {
	reg := prometheus.NewRegistry()
	promx.Counter(reg, "promx_plain_total", "plain").Add(2)
	promx.Counter(reg, "promx_plain_total", "plain").Inc()
	promx.CounterVec(reg, "promx_vec_total", "vec", "k").WithLabelValues("x").Inc()
	depth := 7.0
	promx.GaugeFunc(reg, "promx_gauge", "gauge", func() float64 { return depth })

	v, ok, err := promx.Value(reg, "promx_plain_total")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3.0, v)
	v, ok, err = promx.Value(reg, "promx_vec_total", "k", "x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1.0, v)
	v, ok, err = promx.Value(reg, "promx_gauge")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 7.0, v)
	depth = 9
	v, _, err = promx.Value(reg, "promx_gauge")
	require.NoError(t, err)
	require.Equal(t, 9.0, v, "the gauge is read when scraped, not when registered")

	promx.Gauge(reg, "promx_set", "set").Set(4)
	promx.Gauge(reg, "promx_set", "set").Inc()
	v, ok, err = promx.Value(reg, "promx_set")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 5.0, v, "a second declaration shares the first gauge")
}
