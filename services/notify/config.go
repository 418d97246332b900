package notify

import (
	"fmt"
	"net/url"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
)

// Settings (environment variables, or app.Config.Settings in tests).
const (
	// EnvEmailURL, EnvSMSURL, EnvPushURL point a channel at a running
	// core/fakeprovider (the e2e experiments pass the ones they read as
	// ground truth). Unset, the process starts an in-process loopback one
	// with the channel's capabilities on first use.
	EnvEmailURL = "FENCELAB_NOTIFY_EMAIL_URL"
	EnvSMSURL   = "FENCELAB_NOTIFY_SMS_URL"
	EnvPushURL  = "FENCELAB_NOTIFY_PUSH_URL"
	// EnvCallTimeout bounds one call to a channel; no answer within it is
	// an unknown outcome.
	EnvCallTimeout = "FENCELAB_NOTIFY_CALL_TIMEOUT"
	// EnvMaxAttempts is the claim budget of a delivery task.
	envMaxAttempts = "FENCELAB_NOTIFY_MAX_ATTEMPTS"
	// EnvBackoffBase is the first retry's delay (doubling, equal jitter,
	// capped at claim.BackoffMax).
	EnvBackoffBase = "FENCELAB_NOTIFY_BACKOFF_BASE"
	// EnvRetention is how long a notification whose tasks have all
	// finished is kept (with its tasks, attempts, decisions and jobs)
	// before notify.purge deletes it. It is also NTF-I1's dedupe window:
	// the same (user, event) submitted after that is a new notification.
	EnvRetention = "FENCELAB_NOTIFY_RETENTION"
)

// DefaultRetention is EnvRetention's default.
const DefaultRetention = 30 * 24 * time.Hour

// Config is the module's configuration.
type Config struct {
	URLs        map[string]string // channel → provider base URL ("" = in-process loopback)
	CallTimeout time.Duration
	MaxAttempts int
	BackoffBase time.Duration
	Retention   time.Duration
}

// DefaultConfig is the configuration before settings.
func DefaultConfig() Config {
	return Config{URLs: map[string]string{}, CallTimeout: 5 * time.Second, MaxAttempts: claim.DefaultMaxAttempts, BackoffBase: claim.BackoffBase, Retention: DefaultRetention}
}

// LoadConfig reads the module's settings.
func LoadConfig(c app.Config) (Config, error) {
	cfg := DefaultConfig()
	r := app.NewSettingsReader(c, "notify")
	for ch, key := range map[string]string{ChannelEmail: EnvEmailURL, ChannelSMS: EnvSMSURL, ChannelPush: EnvPushURL} {
		var u string
		r.String(key, &u, checkURL)
		cfg.URLs[ch] = u
	}
	r.Duration(EnvCallTimeout, &cfg.CallTimeout, 10*time.Millisecond, 5*time.Minute)
	r.Int(envMaxAttempts, &cfg.MaxAttempts, 1, 100)
	r.Duration(EnvBackoffBase, &cfg.BackoffBase, time.Millisecond, time.Hour)
	r.Duration(EnvRetention, &cfg.Retention, time.Minute, 10*365*24*time.Hour)
	return cfg, r.Err()
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("an http(s) base URL")
	}
	return nil
}
