package shortlink

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The cache's rules in isolation (pure memory; the database paths are
// covered by the e2e experiments).

func TestCacheNeverHoldsMoreThanItsSize(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 7, 64, 100, 1000} {
		c := newTTLCache[int](size, time.Hour)
		now := time.Now()
		for i := range 10 * size {
			k := fmt.Sprint(i)
			c.Put(k, i, now, c.generation(k))
		}
		require.LessOrEqual(t, c.Len(), size, "size %d", size)
		require.Greater(t, c.Len(), 0)
	}
}

func TestCacheAgeCountsFromWhenTheReadBegan(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	c := newTTLCache[string](10, ttl)
	began := time.Now()
	c.Put("k", "v", began, c.generation("k"))
	_, ok := c.Get("k", began.Add(ttl-time.Nanosecond))
	require.True(t, ok, "younger than the TTL")
	_, ok = c.Get("k", began.Add(ttl))
	require.False(t, ok, "SL-I2: an entry one TTL old is not served, however recently it was stored")
}

func TestCacheKeepsTheYoungerOfTwoReads(t *testing.T) {
	t.Parallel()
	c := newTTLCache[string](10, time.Hour)
	now := time.Now()
	c.Put("k", "new", now, c.generation("k"))
	c.Put("k", "old", now.Add(-time.Second), c.generation("k")) // a slow read finishing late
	v, ok := c.Get("k", now)
	require.True(t, ok)
	require.Equal(t, "new", v)
}

func TestCacheRefusesAReadThatStartedBeforeAnInvalidation(t *testing.T) {
	t.Parallel()
	c := newTTLCache[string](10, time.Hour)
	gen := c.generation("k") // a loader starts reading
	c.Invalidate("k")        // a revocation arrives meanwhile
	c.Put("k", "stale", time.Now(), gen)
	_, ok := c.Get("k", time.Now())
	require.False(t, ok)

	gen = c.generation("k")
	c.Purge()
	c.Put("k", "stale", time.Now(), gen)
	_, ok = c.Get("k", time.Now())
	require.False(t, ok)

	c.Put("k", "fresh", time.Now(), c.generation("k"))
	v, ok := c.Get("k", time.Now())
	require.True(t, ok)
	require.Equal(t, "fresh", v)
}

func TestEvictionPrefersExpiredEntries(t *testing.T) {
	t.Parallel()
	c := newTTLCache[int](1, time.Minute) // one shard of one entry
	now := time.Now()
	c.Put("old", 1, now.Add(-time.Hour), c.generation("old"))
	c.Put("new", 2, now, c.generation("new"))
	_, ok := c.Get("new", now)
	require.True(t, ok)
	require.Equal(t, 1, c.Len())
}

func TestRandomCodesAreValidCodes(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		code := randomCode()
		require.Len(t, code, RandomCodeLen)
		require.True(t, validCode(code), code)
		require.NoError(t, ValidateAlias(code), "a random code also passes the alias rule")
		seen[code] = true
	}
	require.Len(t, seen, 1000)
}
