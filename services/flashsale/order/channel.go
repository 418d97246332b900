package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/fencelab/fencelab/core/fakeprovider"
)

// CallbackPath is where the payment channel posts its signed callbacks.
const CallbackPath = "/flashsale/payments/callback"

// Channel is the payment channel: *fakeprovider.Client speaks its
// protocol (charge with an Idempotency-Key, query by merchant reference,
// close an unpaid charge, refund with a key; signed callbacks).
type Channel interface {
	Create(ctx context.Context, r fakeprovider.CreateRequest) (fakeprovider.Effect, error)
	Find(ctx context.Context, l fakeprovider.Lookup) ([]fakeprovider.Effect, error)
	Close(ctx context.Context, id string) (fakeprovider.Effect, error)
	Refund(ctx context.Context, id string, amount int64, key string) (fakeprovider.Refund, error)
}

// LoopbackCapabilities is the payment channel `fencelab dev` runs in
// process: keys, query, close, refund, asynchronous settlement announced
// by signed callbacks.
func loopbackCapabilities(cfg Config) fakeprovider.Capabilities {
	return fakeprovider.Capabilities{
		Name: "pay", IdempotencyKeys: true, Query: true, Close: true, Refund: true,
		Async: true, SettleAfter: cfg.SettleAfter,
		CallbackURL: cfg.CallbackURL, CallbackSecret: cfg.CallbackSecret,
	}
}

// newChannel returns the configured channel, or an in-process loopback one
// started on first use.
func newChannel(cfg Config, log *slog.Logger) Channel {
	if cfg.PayURL != "" {
		return fakeprovider.NewClient(cfg.PayURL, cfg.CallTimeout)
	}
	return &loopback{cfg: cfg, log: log}
}

// loopback starts a fake payment channel the first time it is called and
// keeps it for the life of the process. It belongs to this process: a
// process sharing the database with others must be pointed at one channel
// (FENCELAB_FLASHSALE_PAY_URL) with them. Until then it answers queries
// only about charges this process asked it for: about any other order its
// "no such charge" would be a lie that closes a paying order, so it gives
// no answer instead, and reconciliation leaves the order alone (ORD-O2).
type loopback struct {
	cfg  Config
	log  *slog.Logger
	once sync.Once
	c    *fakeprovider.Client
	err  error
	refs sync.Map // merchant references this process charged through it
}

// errForeignReference: the loopback channel never saw the reference.
var errForeignReference = errors.New("flashsale: this process's loopback payment channel never charged this reference " +
	"(point every process at one channel with " + EnvPayURL + ")")

func (l *loopback) client() (*fakeprovider.Client, error) {
	l.once.Do(func() {
		srv, err := fakeprovider.Start(loopbackCapabilities(l.cfg))
		if err != nil {
			l.err = fmt.Errorf("flashsale: start the loopback payment channel: %w", err)
			return
		}
		l.log.Info("flashsale: started an in-process fake payment channel", "url", srv.URL(), "callbacks_to", l.cfg.CallbackURL)
		l.c = fakeprovider.NewClient(srv.URL(), l.cfg.CallTimeout)
	})
	return l.c, l.err
}

func (l *loopback) Create(ctx context.Context, r fakeprovider.CreateRequest) (fakeprovider.Effect, error) {
	c, err := l.client()
	if err != nil {
		return fakeprovider.Effect{}, err
	}
	l.refs.Store(r.Reference, true)
	return c.Create(ctx, r)
}

func (l *loopback) Find(ctx context.Context, q fakeprovider.Lookup) ([]fakeprovider.Effect, error) {
	if _, ok := l.refs.Load(q.Reference); !ok || q.Reference == "" {
		return nil, errForeignReference
	}
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	return c.Find(ctx, q)
}

func (l *loopback) Close(ctx context.Context, id string) (fakeprovider.Effect, error) {
	c, err := l.client()
	if err != nil {
		return fakeprovider.Effect{}, err
	}
	return c.Close(ctx, id)
}

func (l *loopback) Refund(ctx context.Context, id string, amount int64, key string) (fakeprovider.Refund, error) {
	c, err := l.client()
	if err != nil {
		return fakeprovider.Refund{}, err
	}
	return c.Refund(ctx, id, amount, key)
}

// chargeStatus reads the answer to a charge (ORD-O2). Only the channel
// refusing the request (a 4xx other than 429) is a definite failure of the
// payment. A 429 or 5xx means "nothing done, come back later", a request
// that never left changed nothing either, and no answer may hide a
// charge: none of these says the payment failed, so none of them may
// fail the order or give its unit back; reconciliation's query settles it.
func chargeStatus(err error) string {
	var se *fakeprovider.StatusError
	switch {
	case err == nil:
		return "" // the effect's own status
	case errors.As(err, &se) && se.Status != http.StatusTooManyRequests && se.Status < 500:
		return payRejected
	case errors.As(err, &se), errors.Is(err, fakeprovider.ErrUnsupported), notSent(err):
		return payUnavailable
	}
	return PayUnknown
}

// notSent reports a request that provably never left (connection refused).
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// settledMeanwhile reports the channel's refusal to close a charge because it has
// settled meanwhile: ask again, it is paid or failed now.
func settledMeanwhile(err error) bool {
	var se *fakeprovider.StatusError
	return errors.As(err, &se) && se.Status == http.StatusConflict
}
