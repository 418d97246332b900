package order

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/fencelab/fencelab/core/app"
)

// Config holds the order layer's settings. Each comes from an environment
// variable (or app.Config.Settings in tests).
type Config struct {
	// PayURL is the payment channel (core/fakeprovider protocol). Empty:
	// the process starts an in-process loopback channel on first use.
	PayURL string
	// CallbackSecret signs the channel's callbacks (HMAC-SHA256). Required
	// with PayURL; the loopback channel gets a random one when unset.
	CallbackSecret []byte
	// CallbackURL is where the loopback channel posts its callbacks
	// (default http://<FENCELAB_ADDR>/flashsale/payments/callback).
	CallbackURL string
	// SettleAfter is how long the loopback channel takes to settle a
	// charge (and call back).
	SettleAfter time.Duration
	// CallTimeout bounds one call to the channel; no answer within it is
	// an unknown outcome (ORD-O2), never a failure.
	CallTimeout time.Duration
	// CallbackWindow is how far a callback's signed timestamp may be from
	// our clock (ORD-O5): a captured callback replayed later is refused.
	CallbackWindow time.Duration
	// ReconcileEvery is the period of the reconciliation job.
	ReconcileEvery time.Duration
	// ReconcileAfter is how long an order waits in PAYING (or REFUNDING)
	// before reconciliation asks the channel about it: long enough for the
	// pay call in flight and its callback. Keep it above CallTimeout.
	ReconcileAfter time.Duration
	// ReconcileBatch bounds the orders one run looks at.
	ReconcileBatch int
	// RefundAttempts is the claim budget of one order's refund job;
	// reconciliation keeps retrying after it is spent (ORD-O4: money is
	// never kept without a unit).
	RefundAttempts int
}

// Setting names, as environment variables.
const (
	EnvPayURL         = "FENCELAB_FLASHSALE_PAY_URL"
	EnvCallbackSecret = "FENCELAB_FLASHSALE_PAY_CALLBACK_SECRET"
	envCallbackURL    = "FENCELAB_FLASHSALE_PAY_CALLBACK_URL"
	envSettleAfter    = "FENCELAB_FLASHSALE_PAY_SETTLE_AFTER"
	EnvCallTimeout    = "FENCELAB_FLASHSALE_PAY_TIMEOUT"
	envCallbackWindow = "FENCELAB_FLASHSALE_CALLBACK_WINDOW"
	envReconcileEvery = "FENCELAB_FLASHSALE_RECONCILE_EVERY"
	EnvReconcileAfter = "FENCELAB_FLASHSALE_RECONCILE_AFTER"
	envReconcileBatch = "FENCELAB_FLASHSALE_RECONCILE_BATCH"
	envRefundAttempts = "FENCELAB_FLASHSALE_REFUND_ATTEMPTS"
)

// MinCallbackSecret is the shortest accepted callback secret (bytes).
const minCallbackSecret = 16

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		SettleAfter:    2 * time.Second,
		CallTimeout:    5 * time.Second,
		CallbackWindow: 5 * time.Minute,
		ReconcileEvery: time.Minute,
		ReconcileAfter: 30 * time.Second,
		ReconcileBatch: 100,
		RefundAttempts: 20,
	}
}

// LoadConfig reads the settings over the defaults and validates them.
func LoadConfig(ac app.Config) (Config, error) {
	c := DefaultConfig()
	r := app.NewSettingsReader(ac, "flashsale")
	var secret string
	r.String(EnvPayURL, &c.PayURL, checkURL)
	r.String(EnvCallbackSecret, &secret, func(s string) error {
		if len(s) < minCallbackSecret {
			return fmt.Errorf("at least %d bytes", minCallbackSecret)
		}
		return nil
	})
	r.String(envCallbackURL, &c.CallbackURL, checkURL)
	r.Duration(envSettleAfter, &c.SettleAfter, 0, time.Hour)
	r.Duration(EnvCallTimeout, &c.CallTimeout, 10*time.Millisecond, 5*time.Minute)
	r.Duration(envCallbackWindow, &c.CallbackWindow, time.Second, 24*time.Hour)
	r.Duration(envReconcileEvery, &c.ReconcileEvery, time.Second, 24*time.Hour)
	r.Duration(EnvReconcileAfter, &c.ReconcileAfter, 0, 24*time.Hour)
	r.Int(envReconcileBatch, &c.ReconcileBatch, 1, 10_000)
	r.Int(envRefundAttempts, &c.RefundAttempts, 1, 1000)
	if r.Err() != nil {
		return Config{}, r.Err()
	}
	c.CallbackSecret = []byte(secret)
	if c.PayURL != "" && len(c.CallbackSecret) == 0 {
		// Without it every callback of the real channel would be refused
		// as forged (ORD-O5), and orders would wait for reconciliation.
		return Config{}, fmt.Errorf("flashsale: %s needs %s (the channel's callback signing secret)", EnvPayURL, EnvCallbackSecret)
	}
	if c.CallbackURL == "" {
		c.CallbackURL = "http://" + loopbackHost(ac.Addr) + CallbackPath
	}
	return c, nil
}

// loopbackHost is an address this process can be reached at from itself:
// the listen address, with an unspecified host made 127.0.0.1.
func loopbackHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "127.0.0.1:8080"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("an http(s) URL")
	}
	return nil
}
