package shortlink

import (
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/app"
)

// Config holds the module's settings. Each comes from an environment
// variable (or app.Config.Settings in tests) and has a default fit for one
// replica of the book's store.
type Config struct {
	// CacheTTL bounds how old an answer the redirect path may serve, and so
	// how long a revoked link can keep redirecting (SL-I2).
	CacheTTL time.Duration
	// CacheSize bounds the known-code cache; unknown codes get a separate
	// cache of a quarter of it, so a scan of random codes cannot evict the
	// links people follow.
	CacheSize int
	// LookupTimeout bounds the database read behind a cache miss. It is
	// capped at CacheTTL: an answer is never served once older than the TTL.
	LookupTimeout time.Duration
	// Listen turns on LISTEN/NOTIFY invalidation: revocations and creations
	// on other replicas reach this cache at once instead of within the TTL.
	// SL-I2's bound does not depend on it.
	Listen bool

	// ClickQueue bounds the clicks waiting for the writer; beyond it clicks
	// are dropped and counted (SL-I3, SL-I4).
	ClickQueue int
	// ClickBatch and ClickInterval shape the writer's batches: up to
	// ClickBatch clicks, waiting at most ClickInterval for a batch to fill.
	ClickBatch    int
	ClickInterval time.Duration
	// StatsURL is the database the click writer uses (default DATABASE_URL).
	// It has its own small pool so a sick stats store cannot take
	// connections from the redirect path.
	StatsURL      string
	StatsMaxConns int
	// StatsTimeout is the stats pool's connect, lock and statement timeout.
	StatsTimeout time.Duration
	// StatsAttempts is how often a batch is tried before its clicks are
	// dropped and counted.
	StatsAttempts int
}

// Setting names, as environment variables.
const (
	EnvCacheTTL      = "FENCELAB_SHORTLINK_CACHE_TTL"
	EnvCacheSize     = "FENCELAB_SHORTLINK_CACHE_SIZE"
	EnvLookupTimeout = "FENCELAB_SHORTLINK_LOOKUP_TIMEOUT"
	EnvListen        = "FENCELAB_SHORTLINK_LISTEN"
	EnvClickQueue    = "FENCELAB_SHORTLINK_CLICK_QUEUE"
	EnvClickBatch    = "FENCELAB_SHORTLINK_CLICK_BATCH"
	EnvClickInterval = "FENCELAB_SHORTLINK_CLICK_INTERVAL"
	EnvStatsURL      = "FENCELAB_SHORTLINK_STATS_DATABASE_URL"
	EnvStatsMaxConns = "FENCELAB_SHORTLINK_STATS_MAX_CONNS"
	EnvStatsTimeout  = "FENCELAB_SHORTLINK_STATS_TIMEOUT"
	EnvStatsAttempts = "FENCELAB_SHORTLINK_STATS_ATTEMPTS"
)

// DefaultConfig returns the defaults; StatsURL is filled from the app.
func DefaultConfig() Config {
	return Config{
		CacheTTL:      5 * time.Second,
		CacheSize:     100_000,
		LookupTimeout: time.Second,
		Listen:        true,
		ClickQueue:    10_000,
		ClickBatch:    500,
		ClickInterval: 100 * time.Millisecond,
		StatsMaxConns: 2,
		StatsTimeout:  500 * time.Millisecond,
		StatsAttempts: 3,
	}
}

// LoadConfig reads the settings over the defaults and validates them.
func LoadConfig(ac app.Config) (Config, error) {
	c := DefaultConfig()
	c.StatsURL = ac.DatabaseURL
	r := settingsReader{ac: ac}
	r.duration(EnvCacheTTL, &c.CacheTTL, time.Millisecond, time.Hour)
	r.int(EnvCacheSize, &c.CacheSize, 1, 100_000_000)
	r.duration(EnvLookupTimeout, &c.LookupTimeout, time.Millisecond, time.Minute)
	r.bool(EnvListen, &c.Listen)
	r.int(EnvClickQueue, &c.ClickQueue, 1, 10_000_000)
	r.int(EnvClickBatch, &c.ClickBatch, 1, 10_000)
	r.duration(EnvClickInterval, &c.ClickInterval, time.Millisecond, time.Minute)
	if v, ok := ac.Lookup(EnvStatsURL); ok {
		c.StatsURL = v
	}
	r.int(EnvStatsMaxConns, &c.StatsMaxConns, 1, 100)
	r.duration(EnvStatsTimeout, &c.StatsTimeout, time.Millisecond, time.Minute)
	r.int(EnvStatsAttempts, &c.StatsAttempts, 1, 100)
	if r.err != nil {
		return Config{}, r.err
	}
	if _, err := pgxpool.ParseConfig(c.StatsURL); err != nil {
		return Config{}, fmt.Errorf("shortlink: stats database url (%s): %w", EnvStatsURL, err)
	}
	// SL-I2: a read that began more than one TTL ago is never served, so a
	// lookup may not be allowed to run longer than that.
	c.LookupTimeout = min(c.LookupTimeout, c.CacheTTL)
	return c, nil
}

// settingsReader parses settings, keeping the first error.
type settingsReader struct {
	ac  app.Config
	err error
}

func (r *settingsReader) fail(key, v, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("shortlink: %s=%q: want %s", key, v, want)
	}
}

func (r *settingsReader) duration(key string, dst *time.Duration, lo, hi time.Duration) {
	v, ok := r.ac.Lookup(key)
	if !ok {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		r.fail(key, v, fmt.Sprintf("a duration in %v..%v", lo, hi))
		return
	}
	*dst = d
}

func (r *settingsReader) int(key string, dst *int, lo, hi int) {
	v, ok := r.ac.Lookup(key)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(key, v, fmt.Sprintf("an integer in %d..%d", lo, hi))
		return
	}
	*dst = n
}

func (r *settingsReader) bool(key string, dst *bool) {
	v, ok := r.ac.Lookup(key)
	if !ok {
		return
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(key, v, "true or false")
		return
	}
	*dst = b
}
