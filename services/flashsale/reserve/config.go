package reserve

import (
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// config holds the reservation layer's settings. Each comes from an
// environment variable (or app.Config.Settings in tests).
type config struct {
	// Limit is how many reservation operations of this process may be in
	// the database at once (FS-R4). Past it, requests wait in a line.
	Limit int
	// WaitLine bounds that line; a request that finds it full gets 503 +
	// Retry-After at once instead of queueing without bound.
	WaitLine int
	// MaxWait bounds the time a request spends in line before it too gets
	// a 503 (0: until its client gives up).
	MaxWait time.Duration
	// HoldTTL is how long an unpaid hold keeps its unit.
	HoldTTL time.Duration
	// ReleaseEvery is the period of the release job (a claim-engine
	// periodic kind); an expired hold waits at most this long for it.
	ReleaseEvery time.Duration
	// ReleaseBatch bounds the holds one release statement returns.
	ReleaseBatch int
}

// Setting names, as environment variables.
const (
	EnvLimit        = "FENCELAB_FLASHSALE_LIMIT"
	EnvWaitLine     = "FENCELAB_FLASHSALE_WAIT_LINE"
	EnvMaxWait      = "FENCELAB_FLASHSALE_MAX_WAIT"
	envHoldTTL      = "FENCELAB_FLASHSALE_HOLD_TTL"
	envReleaseEvery = "FENCELAB_FLASHSALE_RELEASE_EVERY"
	EnvReleaseBatch = "FENCELAB_FLASHSALE_RELEASE_BATCH"
)

// DefaultConfig returns the book's numbers: 8 in the database, 16 waiting.
func DefaultConfig() config {
	return config{
		Limit:        8,
		WaitLine:     16,
		MaxWait:      2 * time.Second,
		HoldTTL:      DefaultHoldTTL,
		ReleaseEvery: time.Minute,
		ReleaseBatch: defaultReleaseBatch,
	}
}

// LoadConfig reads the settings over the defaults and validates them.
func LoadConfig(ac app.Config) (config, error) {
	c := DefaultConfig()
	// The default limit fits a smaller pool (FENCELAB_DB_MAX_CONNS=4 is a
	// server that works); only a limit set above the pool is refused.
	if ac.MaxConns > 0 {
		c.Limit = min(c.Limit, ac.MaxConns)
	}
	r := app.NewSettingsReader(ac, "flashsale")
	r.Int(EnvLimit, &c.Limit, 1, 1000)
	r.Int(EnvWaitLine, &c.WaitLine, 0, 1_000_000)
	r.Duration(EnvMaxWait, &c.MaxWait, 0, time.Minute)
	r.Duration(envHoldTTL, &c.HoldTTL, time.Second, 24*time.Hour)
	r.Duration(envReleaseEvery, &c.ReleaseEvery, time.Second, time.Hour)
	r.Int(EnvReleaseBatch, &c.ReleaseBatch, 1, 10_000)
	if r.Err() != nil {
		return config{}, r.Err()
	}
	// Admitted operations beyond the pool would queue for a connection
	// inside the pool, unbounded and unmeasured: the line the limiter
	// exists to bound.
	if ac.MaxConns > 0 && c.Limit > ac.MaxConns {
		return config{}, fmt.Errorf("flashsale: %s=%d exceeds the pool (FENCELAB_DB_MAX_CONNS=%d)", EnvLimit, c.Limit, ac.MaxConns)
	}
	return c, nil
}
