package notify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/fencelab/fencelab/core/fakeprovider"
)

// The channels. Their contracts differ in exactly the two ways that decide
// what a retry after "no answer" may do (NTF-I4).
const (
	ChannelEmail = "email"
	ChannelSMS   = "sms"
	ChannelPush  = "push"
)

// Channel is one external channel and its contract.
type Channel struct {
	Name string
	// Keys: the channel honours Idempotency-Key, so sending again with the
	// same key cannot make a second message. After no answer: resend.
	Keys bool
	// Query: the channel answers an authoritative lookup by message
	// reference. After no answer: ask first, resend only on "absent".
	Query bool
	// Neither: after no answer nothing automatic is safe; a person decides.
}

// Channels lists every channel in a fixed order (preferences, task creation).
var Channels = []Channel{
	{Name: ChannelEmail, Keys: true},
	{Name: ChannelSMS, Query: true},
	{Name: ChannelPush},
}

func channelByName(name string) (Channel, bool) {
	for _, c := range Channels {
		if c.Name == name {
			return c, true
		}
	}
	return Channel{}, false
}

// Capabilities is the fake provider standing in for the channel.
func (c Channel) Capabilities() fakeprovider.Capabilities {
	return fakeprovider.Capabilities{Name: c.Name, IdempotencyKeys: c.Keys, Query: c.Query}
}

// Kind is the claim-engine job kind of the channel's tasks.
func (c Channel) Kind() string { return "notify." + c.Name }

// Sender is what a channel is called through: *fakeprovider.Client.
type sender interface {
	Create(ctx context.Context, r fakeprovider.CreateRequest) (fakeprovider.Effect, error)
	Find(ctx context.Context, l fakeprovider.Lookup) ([]fakeprovider.Effect, error)
}

// newSender returns the channel's client: the configured provider, or an
// in-process loopback one started on first use.
func newSender(c Channel, baseURL string, cfg Config, log *slog.Logger) sender {
	if baseURL != "" {
		return fakeprovider.NewClient(baseURL, cfg.CallTimeout)
	}
	return &loopback{ch: c, cfg: cfg, log: log}
}

// loopback starts a fake provider with the channel's capabilities the first
// time the channel is called and keeps it for the life of the process (dev,
// and any process not pointed at a provider).
type loopback struct {
	ch   Channel
	cfg  Config
	log  *slog.Logger
	once sync.Once
	srv  *fakeprovider.Server
	c    *fakeprovider.Client
	err  error
}

func (l *loopback) client() (*fakeprovider.Client, error) {
	l.once.Do(func() {
		srv, err := fakeprovider.Start(l.ch.Capabilities())
		if err != nil {
			l.err = fmt.Errorf("notify: start loopback %s channel: %w", l.ch.Name, err)
			return
		}
		l.log.Info("notify: started an in-process fake channel", "channel", l.ch.Name, "url", srv.URL())
		l.srv, l.c = srv, fakeprovider.NewClient(srv.URL(), l.cfg.CallTimeout)
	})
	return l.c, l.err
}

func (l *loopback) Create(ctx context.Context, r fakeprovider.CreateRequest) (fakeprovider.Effect, error) {
	c, err := l.client()
	if err != nil {
		return fakeprovider.Effect{}, err
	}
	return c.Create(ctx, r)
}

func (l *loopback) Find(ctx context.Context, q fakeprovider.Lookup) ([]fakeprovider.Effect, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	return c.Find(ctx, q)
}

// inject arms a fault in the loopback channel (dev and experiments only:
// a configured provider is another party and is never touched).
func (l *loopback) inject(f fakeprovider.Fault) error {
	if _, err := l.client(); err != nil {
		return err
	}
	l.srv.Inject(f)
	return nil
}
