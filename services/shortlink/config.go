package shortlink

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
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
	// BaseURL is the public address short links are built on
	// (short_url = BaseURL + "/s/" + code). It is configured, never taken
	// from the request's Host header, which any client can set. Default:
	// http:// and the listen address.
	BaseURL string

	// AllowPrivateTargets accepts targets on loopback, private,
	// link-local and metadata addresses and localhost names; off by
	// default, so an outsider's link cannot point followers into the
	// network the service runs in. A deployment that shortens its own
	// intranet links turns it on.
	AllowPrivateTargets bool

	// ClickRetention is how long click and drop rows are kept; the
	// shortlink.purge kind deletes older ones, and the per-link counters
	// keep the totals (SL-I5).
	ClickRetention time.Duration
}

// Setting names, as environment variables.
const (
	EnvCacheTTL       = "FENCELAB_SHORTLINK_CACHE_TTL"
	envCacheSize      = "FENCELAB_SHORTLINK_CACHE_SIZE"
	EnvLookupTimeout  = "FENCELAB_SHORTLINK_LOOKUP_TIMEOUT"
	EnvListen         = "FENCELAB_SHORTLINK_LISTEN"
	EnvClickQueue     = "FENCELAB_SHORTLINK_CLICK_QUEUE"
	EnvClickBatch     = "FENCELAB_SHORTLINK_CLICK_BATCH"
	EnvClickInterval  = "FENCELAB_SHORTLINK_CLICK_INTERVAL"
	EnvStatsURL       = "FENCELAB_SHORTLINK_STATS_DATABASE_URL"
	envStatsMaxConns  = "FENCELAB_SHORTLINK_STATS_MAX_CONNS"
	EnvStatsTimeout   = "FENCELAB_SHORTLINK_STATS_TIMEOUT"
	EnvStatsAttempts  = "FENCELAB_SHORTLINK_STATS_ATTEMPTS"
	EnvBaseURL        = "FENCELAB_SHORTLINK_BASE_URL"
	envClickRetention = "FENCELAB_SHORTLINK_CLICK_RETENTION"
	EnvAllowPrivate   = "FENCELAB_SHORTLINK_ALLOW_PRIVATE_TARGETS"
)

// DefaultConfig returns the defaults; StatsURL is filled from the app.
func DefaultConfig() Config {
	return Config{
		CacheTTL:       5 * time.Second,
		CacheSize:      100_000,
		LookupTimeout:  time.Second,
		Listen:         true,
		ClickQueue:     10_000,
		ClickBatch:     500,
		ClickInterval:  100 * time.Millisecond,
		StatsMaxConns:  2,
		StatsTimeout:   500 * time.Millisecond,
		StatsAttempts:  3,
		ClickRetention: 90 * 24 * time.Hour,
	}
}

// LoadConfig reads the settings over the defaults and validates them.
func LoadConfig(ac app.Config) (Config, error) {
	c := DefaultConfig()
	c.StatsURL = ac.DatabaseURL
	r := app.NewSettingsReader(ac, "shortlink")
	r.Duration(EnvCacheTTL, &c.CacheTTL, time.Millisecond, time.Hour)
	r.Int(envCacheSize, &c.CacheSize, 1, 100_000_000)
	r.Duration(EnvLookupTimeout, &c.LookupTimeout, time.Millisecond, time.Minute)
	r.Bool(EnvListen, &c.Listen)
	r.Int(EnvClickQueue, &c.ClickQueue, 1, 10_000_000)
	r.Int(EnvClickBatch, &c.ClickBatch, 1, 10_000)
	r.Duration(EnvClickInterval, &c.ClickInterval, time.Millisecond, time.Minute)
	if v, ok := ac.Lookup(EnvStatsURL); ok {
		c.StatsURL = v
	}
	r.Int(envStatsMaxConns, &c.StatsMaxConns, 1, 100)
	r.Duration(EnvStatsTimeout, &c.StatsTimeout, time.Millisecond, time.Minute)
	r.Int(EnvStatsAttempts, &c.StatsAttempts, 1, 100)
	c.BaseURL = defaultBaseURL(ac.Addr)
	r.String(EnvBaseURL, &c.BaseURL, func(v string) error {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return errors.New("want an absolute http(s) URL with no path, like https://go.example.com")
		}
		return nil
	})
	c.BaseURL = strings.TrimSuffix(c.BaseURL, "/")
	r.Duration(envClickRetention, &c.ClickRetention, time.Hour, 10*366*24*time.Hour)
	r.Bool(EnvAllowPrivate, &c.AllowPrivateTargets)
	if r.Err() != nil {
		return Config{}, r.Err()
	}
	if _, err := pgxpool.ParseConfig(c.StatsURL); err != nil {
		return Config{}, fmt.Errorf("shortlink: stats database url (%s): %w", EnvStatsURL, err)
	}
	// SL-I2: a read that began more than one TTL ago is never served, so a
	// lookup may not be allowed to run longer than that.
	c.LookupTimeout = min(c.LookupTimeout, c.CacheTTL)
	return c, nil
}

// defaultBaseURL is http:// and the listen address, with an unspecified
// host (":8080", "0.0.0.0:8080") read as localhost.
func defaultBaseURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://localhost:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}
