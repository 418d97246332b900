// Package notify is the notification service (chapter 11,
// "Notifications", docs/chapters/11-notify.md). The hardest outcome of calling an
// external channel is no outcome: the request left and no answer came
// back. The database makes "one logical notification per event" a hard
// constraint (NTF-I1) and gives each channel's delivery one task with one
// token at a time (NTF-I2, on core/claim); whether the user receives it
// once depends on the channel's contract (NTF-I4), so every call is
// recorded, unknown included, and never rewritten (NTF-I3), and "unknown"
// is a durable state with a way out: resend with the same key, ask the
// channel, or a person's decision. A preference turned off before the
// claim cancels the task inside the claim transaction (NTF-I5).
package notify

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
)

// Module is notify: intake, preferences, delivery by channel contract, review.
func Module() app.Module {
	return app.Module{
		Name: "notify", Chapter: "notify",
		Invariants: Invariants, Errors: Errors,
		Build: app.BuildService(LoadConfig, NewService, runtime),
	}
}

// runtime is the module's part of a process: routes, delivery kinds,
// demo seed.
func runtime(d app.Deps, _ Config, s *Service) (app.Runtime, error) {
	keys := d.Keys()
	h := &handlers{svc: s}
	return app.Runtime{
		Routes: func(e *echo.Echo) { routes(e, h, d.Auth, keys) },
		Kinds:  append(s.kinds(), s.purgeKind()),
		Seed:   s.seed,
	}, nil
}

// NewService builds the service from the shared dependencies and its
// settings (LoadConfig).
func NewService(d app.Deps, cfg Config) (*Service, error) {
	log := d.Logger()
	m, err := newMetrics(d.Registerer())
	if err != nil {
		return nil, err
	}
	senders := make(map[string]sender, len(Channels))
	for _, ch := range Channels {
		senders[ch.Name] = newSender(ch, cfg.URLs[ch.Name], cfg, log)
	}
	return &Service{pool: d.Pool, jobs: d.Jobs, log: log, faults: d.Faults, cfg: cfg, senders: senders, m: m}, nil
}
