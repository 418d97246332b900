package feed

import (
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// Config is the feed's configuration (LoadConfig reads it from settings).
type Config struct {
	// Strategy is the fan-out policy the consumer applies when a post
	// settles, and the read strategy of a request that names none.
	Strategy Strategy
	// Threshold is hybrid's, for requests that ask for hybrid.
	Threshold int64
	// ResponseLog records every served post for FEED-I1's check, keeping
	// the newest ResponseLogRows rows.
	ResponseLog     bool
	ResponseLogRows int64
	// CursorKey signs cursors (CursorKey(token secret)).
	CursorKey []byte
	// BackfillPosts bounds a new follow's backfill to the author's newest
	// pushed posts (FENCELAB_FEED_BACKFILL_POSTS, default
	// defaultBackfillPosts, at least MinBackfillPosts).
	BackfillPosts int
	// InboxRetention is how long an inbox row is kept, from its post's
	// creation (FENCELAB_FEED_INBOX_RETENTION, default
	// defaultInboxRetention); feed.purge deletes older ones.
	InboxRetention time.Duration
}

// defaultInboxRetention is InboxRetention's default.
const defaultInboxRetention = 90 * 24 * time.Hour

// Backfill bounds: the default, and the least a setting may ask for —
// FEED-I2 checks completeness over the newest MinBackfillPosts of each
// author, which every allowed setting backfills.
const (
	defaultBackfillPosts = 500
	MinBackfillPosts     = 50
)

// Settings (environment, or app.Config.Settings in tests).
const (
	// EnvStrategy: push, pull or hybrid — the fan-out policy and the
	// default read strategy (default hybrid).
	EnvStrategy = "FENCELAB_FEED_STRATEGY"
	// EnvThreshold: hybrid pulls authors with this many active followers
	// or more (default DefaultThreshold).
	EnvThreshold = "FENCELAB_FEED_HYBRID_THRESHOLD"
	// EnvResponseLog: record every served post for FEED-I1 (default false).
	EnvResponseLog = "FENCELAB_FEED_RESPONSE_LOG"
	// EnvResponseLogRows: how many log rows to keep (default 100000).
	EnvResponseLogRows = "FENCELAB_FEED_RESPONSE_LOG_ROWS"
	// EnvBackfillPosts: how many of an author's newest pushed posts a new
	// follow copies into the follower's inbox (default defaultBackfillPosts).
	EnvBackfillPosts = "FENCELAB_FEED_BACKFILL_POSTS"
	// envInboxRetention: how long inbox rows are kept, from their post's
	// creation (default defaultInboxRetention). A push read reaches back
	// this far; pull and hybrid's pull side read further.
	envInboxRetention = "FENCELAB_FEED_INBOX_RETENTION"
)

// LoadConfig reads the feed's settings (app.Config.Settings first, then
// the environment).
func LoadConfig(c app.Config) (Config, error) {
	r := app.NewSettingsReader(c, "social/feed")
	name, threshold := "hybrid", DefaultThreshold
	r.String(EnvStrategy, &name, func(v string) error {
		_, err := ParseStrategy(v, 1)
		return err
	})
	r.Int(EnvThreshold, &threshold, 1, 1<<30)
	cfg := Config{ResponseLogRows: 100_000, CursorKey: CursorKey([]byte(c.TokenSecret))}
	r.Bool(EnvResponseLog, &cfg.ResponseLog)
	rows := int(cfg.ResponseLogRows)
	r.Int(EnvResponseLogRows, &rows, 100, 100_000_000)
	cfg.BackfillPosts = defaultBackfillPosts
	r.Int(EnvBackfillPosts, &cfg.BackfillPosts, MinBackfillPosts, 1_000_000)
	cfg.InboxRetention = defaultInboxRetention
	r.Duration(envInboxRetention, &cfg.InboxRetention, time.Minute, 10*365*24*time.Hour)
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	cfg.ResponseLogRows, cfg.Threshold = int64(rows), int64(threshold)
	st, err := ParseStrategy(name, cfg.Threshold)
	if err != nil {
		return Config{}, err
	}
	cfg.Strategy = st
	return cfg, nil
}
