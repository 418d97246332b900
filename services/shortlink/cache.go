package shortlink

import (
	"hash/maphash"
	"sync"
	"time"
)

// ttlCache is a bounded cache whose entries are served only while younger
// than ttl, where an entry's age counts from when the database read that
// produced it *began* — not from when it was stored. That is what makes
// SL-I2's bound exact: the read's snapshot is taken after it began, so an
// entry older than ttl is the only way to see a state older than ttl.
// (Off-the-shelf TTL caches count from insertion, which would add the
// lookup's duration to the bound.)
//
// It is sharded so that concurrent redirects mostly take different read
// locks, and hits never write. When a shard is full, storing evicts the
// oldest of a few sampled entries (expired ones are the oldest).
type ttlCache[V any] struct {
	ttl    time.Duration
	seed   maphash.Seed
	shards []cacheShard[V]
}

type cacheShard[V any] struct {
	mu      sync.RWMutex
	entries map[string]cacheEntry[V]
	limit   int
	// gen counts invalidations in this shard. A loader reads it before its
	// database read and stores only if it has not moved, so an answer read
	// before an invalidation cannot be stored after it.
	gen uint64
}

type cacheEntry[V any] struct {
	val    V
	loaded time.Time // when the read behind val began (monotonic)
}

const (
	maxShards     = 64
	evictionProbe = 5
)

// newTTLCache returns a cache of at most size entries (size ≥ 1).
func newTTLCache[V any](size int, ttl time.Duration) *ttlCache[V] {
	n := min(maxShards, size)
	c := &ttlCache[V]{ttl: ttl, seed: maphash.MakeSeed(), shards: make([]cacheShard[V], n)}
	for i := range c.shards {
		limit := size / n
		if i < size%n {
			limit++
		}
		c.shards[i] = cacheShard[V]{entries: make(map[string]cacheEntry[V]), limit: limit}
	}
	return c
}

func (c *ttlCache[V]) shard(key string) *cacheShard[V] {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// Get returns the value for key if it was read less than ttl before now.
func (c *ttlCache[V]) Get(key string, now time.Time) (V, bool) {
	s := c.shard(key)
	s.mu.RLock()
	e, ok := s.entries[key]
	s.mu.RUnlock()
	if !ok || now.Sub(e.loaded) >= c.ttl {
		var zero V
		return zero, false
	}
	return e.val, true
}

// Generation is read by a loader before its database read and handed to
// Put.
func (c *ttlCache[V]) generation(key string) uint64 {
	s := c.shard(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// Put stores val, read from the database starting at loaded, unless the
// key's shard saw an invalidation since gen was read or holds a younger
// entry for key.
func (c *ttlCache[V]) Put(key string, val V, loaded time.Time, gen uint64) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return
	}
	if old, ok := s.entries[key]; ok {
		if old.loaded.After(loaded) {
			return
		}
	} else if len(s.entries) >= s.limit {
		s.evictOne()
	}
	s.entries[key] = cacheEntry[V]{val: val, loaded: loaded}
}

// evictOne removes the oldest of a few entries; map iteration starts at a
// random position, so this samples the shard.
func (s *cacheShard[V]) evictOne() {
	var victim string
	var oldest time.Time
	n := 0
	for k, e := range s.entries {
		if n == 0 || e.loaded.Before(oldest) {
			victim, oldest = k, e.loaded
		}
		if n++; n == evictionProbe {
			break
		}
	}
	delete(s.entries, victim)
}

// Invalidate forgets key (a revocation or creation elsewhere).
func (c *ttlCache[V]) Invalidate(key string) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, key)
	s.gen++
}

// Purge forgets everything (the invalidation feed was interrupted).
func (c *ttlCache[V]) Purge() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.entries)
		s.gen++
		s.mu.Unlock()
	}
}

// Len counts entries, expired ones included (for the metrics).
func (c *ttlCache[V]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.entries)
		s.mu.RUnlock()
	}
	return n
}
