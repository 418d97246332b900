package points

import "github.com/fencelab/fencelab/core/app"

// Config holds the module's settings.
type Config struct {
	// SystemShards is how many rows the system side of transactions is
	// spread over (1..MaxSystemShards). 1 is the naive hot row: every
	// debit waits for the previous one's commit on sys:redemption.
	SystemShards int
}

// Settings, as environment variables.
const EnvSystemShards = "FENCELAB_POINTS_SYSTEM_SHARDS"

// Shard counts. The migration creates MaxSystemShards rows per system
// account; a smaller setting uses the first ones, and balances always sum
// over all of them, so the setting can change at any time.
const (
	DefaultSystemShards = 64
	MaxSystemShards     = 64
)

// LoadConfig reads the settings (app.Config.Settings first, then the
// environment).
func LoadConfig(c app.Config) (Config, error) {
	cfg := Config{SystemShards: DefaultSystemShards}
	r := app.NewSettingsReader(c, "points")
	r.Int(EnvSystemShards, &cfg.SystemShards, 1, MaxSystemShards)
	return cfg, r.Err()
}
