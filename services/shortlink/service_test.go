package shortlink

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// invariants are this package's own.
var invariants = invariant.MustRegistry(invariant.Core, Invariants)

// newTestService builds the service on a fresh database, without its
// background tasks.
func newTestService(t *testing.T, edit func(*Config)) *Service {
	t.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	s, err := NewService(app.Standalone(pgtest.New(t)), cfg)
	require.NoError(t, err)
	return s
}

// A random code that collides with an existing one is redrawn, never
// stored over it (SL-I1); when every draw collides, the caller is told to
// retry.
func TestRandomCodeCollisionDrawsAnotherCode(t *testing.T) {
	t.Parallel()
	s := newTestService(t, nil)
	ctx := context.Background()
	// The first link holds the random code the next draws collide with
	// (aliases are lower case, so a random one is used).
	s.newCode = func() string { return "Coll1de8" }
	_, err := s.Create(ctx, "user-0001", CreateRequest{Target: "https://first.example.test/"})
	require.NoError(t, err)

	draws := []string{"Coll1de8", "Coll1de8", "Fresh456"}
	s.newCode = func() string { c := draws[0]; draws = draws[1:]; return c }
	l, err := s.Create(ctx, "user-0002", CreateRequest{Target: "https://second.example.test/"})
	require.NoError(t, err)
	require.Equal(t, "Fresh456", l.Code)
	require.Empty(t, draws)

	s.newCode = func() string { return "Coll1de8" }
	_, err = s.Create(ctx, "user-0002", CreateRequest{Target: "https://third.example.test/"})
	require.ErrorIs(t, err, errCodeExhausted)

	first, err := getLink(ctx, s.db, "Coll1de8")
	require.NoError(t, err)
	require.Equal(t, "https://first.example.test/", first.Target)
	require.Equal(t, "user-0001", first.Owner)
	invariants.Assert(t, s.db, "shortlink")
}

// A cached live link stops at its expiry exactly: the expiry travels with
// the cached answer and is checked on every visit, not at the TTL.
func TestCachedLinkStopsAtItsExpiry(t *testing.T) {
	t.Parallel()
	s := newTestService(t, func(c *Config) { c.CacheTTL = time.Hour })
	ctx := context.Background()
	expires := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	_, err := s.Create(ctx, "user-0042", CreateRequest{Target: "https://example.test/", Alias: "brief", ExpiresAt: &expires})
	require.NoError(t, err)

	_, err = s.Visit(ctx, "brief") // caches the route
	require.NoError(t, err)
	hits := value(t, s.m.hit)
	s.now = func() time.Time { return expires.Add(-time.Microsecond) }
	_, err = s.Visit(ctx, "brief")
	require.NoError(t, err)
	s.now = func() time.Time { return expires }
	_, err = s.Visit(ctx, "brief")
	require.ErrorIs(t, err, errExpired)
	require.Equal(t, hits+2, value(t, s.m.hit), "both answers came from the cache")
	invariants.Assert(t, s.db, "shortlink")
}

func TestConfigRefusesMalformedSettings(t *testing.T) {
	t.Parallel()
	for key, v := range map[string]string{
		EnvCacheTTL: "soon", envCacheSize: "0", EnvClickQueue: "-1", EnvListen: "maybe",
		EnvStatsTimeout: "0s", EnvStatsURL: "postgres://%zz",
	} {
		_, err := LoadConfig(app.Config{DatabaseURL: "postgres://localhost/x", Settings: map[string]string{key: v}})
		require.Error(t, err, "%s=%s", key, v)
	}
	c, err := LoadConfig(app.Config{DatabaseURL: "postgres://localhost/x", Settings: map[string]string{
		EnvCacheTTL: "200ms", EnvLookupTimeout: "1s"}})
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, c.LookupTimeout, "SL-I2: a lookup may not outlive the TTL")
	require.Equal(t, "postgres://localhost/x", c.StatsURL)
}

func value(t *testing.T, c prometheus.Counter) float64 {
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
