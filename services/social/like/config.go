package like

import "github.com/fencelab/fencelab/core/app"

// Config is like's configuration (LoadConfig reads it from settings).
type Config struct {
	// RecomputeChunk is how many items one recompute transaction recounts
	// (EnvRecomputeChunk; 0 means DefaultChunk).
	RecomputeChunk int
}

// EnvRecomputeChunk is the setting for Config.RecomputeChunk (environment,
// or app.Config.Settings in tests).
const EnvRecomputeChunk = "FENCELAB_SOCIAL_LIKE_RECOMPUTE_CHUNK"

// LoadConfig reads like's settings (app.Config.Settings first, then the
// environment).
func LoadConfig(c app.Config) (Config, error) {
	cfg := Config{RecomputeChunk: DefaultChunk}
	r := app.NewSettingsReader(c, "social/like")
	r.Int(EnvRecomputeChunk, &cfg.RecomputeChunk, 1, 100000)
	return cfg, r.Err()
}
