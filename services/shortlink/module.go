// Package shortlink is the short-link service (chapter 12, "Short links",
// docs/chapters/12-shortlink.md): one lookup and a 302 on the main path, and
// three edges made explicit — two creators racing for one alias (SL-I1),
// how long a revoked link keeps redirecting (SL-I2), and a sick stats store
// that must not slow or fail redirects (SL-I3, SL-I4).
package shortlink

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
)

// PurgeKind is the periodic kind that enforces ClickRetention.
const PurgeKind = "shortlink.purge"

// DemoCode is the link `fencelab dev` seeds.
const DemoCode = "demo"

// Module is shortlink: short links: creation, redirects, click counting.
func Module() app.Module {
	return app.Module{
		Name: "shortlink", Chapter: "shortlink",
		Invariants: Invariants, Errors: Errors,
		Build: app.BuildService(LoadConfig, NewService, runtime),
	}
}

// runtime is the module's part of a process: routes, the click writer
// and invalidation listener, the click retention, the demo seed.
func runtime(d app.Deps, cfg Config, svc *Service) (app.Runtime, error) {
	tasks := []app.Task{{Name: "click-writer", Run: svc.clicks.Run}}
	if cfg.Listen {
		tasks = append(tasks, app.Task{Name: "invalidation-listener", Run: svc.listen})
	}
	h := &handlers{svc: svc}
	return app.Runtime{
		Routes:  func(e *echo.Echo) { routes(e, h, d.Auth) },
		Mounted: svc.reserveRoutes,
		Tasks:   tasks,
		Seed:    svc.seed,
		Kinds: []claim.Kind{claim.RetentionKind(PurgeKind, cfg.ClickRetention, func(ctx context.Context) (any, error) {
			n, err := PurgeClicks(ctx, d.Pool, cfg.ClickRetention)
			return claim.Deleted(n), err
		})},
	}, nil
}

// NewService builds the service from the shared dependencies and its
// settings (LoadConfig).
func NewService(d app.Deps, cfg Config) (*Service, error) {
	reg, log := d.Registerer(), d.Logger()
	s := &Service{db: d.Pool, log: log, newCode: randomCode, now: time.Now, baseURL: cfg.BaseURL, allowPrivate: cfg.AllowPrivateTargets}
	// The gauges read the queue and caches at scrape time.
	s.m = newMetrics(reg, func() int { return s.clicks.queue.depth() }, func() int { return s.resolver.len() })
	s.resolver = newResolver(cfg, func(ctx context.Context, code string) (route, bool, error) {
		return lookupRoute(ctx, s.db, code)
	}, s.m, log)
	s.clicks = newClickRecorder(cfg, d.Pool, log, d.Faults, s.m)
	return s, nil
}

// seed creates the demo link for `fencelab dev` unless it exists.
func (s *Service) seed(ctx context.Context) error {
	_, _, err := createLink(ctx, s.db, DemoCode, "https://book.example.test/chapters/short-links", "user-0042", true, nil)
	return err
}
