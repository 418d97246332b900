// Package console is the web console served by the deployable at `/`: the
// book's chapters with their invariants' live status on this database and
// the lab's experiments runnable on scratch databases, and the operator's
// places to look and act — the claim queue, one review inbox for
// everything that waits for a person, outbox consumers, admission gauges.
//
// Pages are server-rendered html/template with embedded assets and no
// script: everything reads with JavaScript off (a running experiment's page
// refreshes itself with <meta http-equiv=refresh>). The book's pages read
// signed out. A person signs in by pasting a bearer token: the console
// verifies it once and opens a session on the server (console_session),
// whose random id goes into an HttpOnly, SameSite=Strict cookie; signing
// out deletes the session, so a copied cookie dies with it.
//
// The console reads across modules, so it sits beside services.go; core/
// never imports it. It owns one table, console_session, purged by
// console.purge once a session expires. Actions call what the API already
// has: a notify review decision and an order reconciliation go through the
// module's own HTTP handler in-process, carrying the person's token, so the
// decision is recorded with who and why exactly as through the API; a claim
// job's decision is claim.Client.DecideTx, the function notify's review
// itself calls.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/services/flashsale/order"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options are what the console cannot build itself: the module list's
// invariants and experiments, and the runner of experiments, whose
// environment starts the whole deployable — so whoever assembles the
// program (labenv.Modules) passes them in.
type Options struct {
	// Experiments are the lab's experiments (services.Experiments()).
	Experiments []lab.Experiment
	// Invariants is the deployable's registry (services.Invariants()).
	Invariants *invariant.Registry
	// Runner runs experiments on scratch databases (nil: experiments are
	// listed but cannot be run from this process). The caller owns it.
	Runner *Runner
	// CheckEvery is how old the invariants' live status may get before a
	// page view starts a fresh check in the background (default 1 min).
	CheckEvery time.Duration
	// SampleEvery is the charts' sampling period (default 5 s); the charts
	// keep the last Samples samples (default 120: ten minutes).
	SampleEvery time.Duration
	Samples     int
}

// Console is the module's runtime.
type Console struct {
	d        app.Deps
	o        Options
	log      *slog.Logger
	pages    map[string]*pageTemplate
	csrfKey  []byte
	api      *echo.Echo // the deployable's own routes, for actions through the API
	checks   *checker
	sessions *sessionStore
	runs     *Runner
	stepping *steppingStore // "Step it by hand": in memory, see stepping.go
	samples  *sampler
	gauges   gaugeCache
	// reconcileAfter is the orders' reconciliation delay: an order in
	// PAYING or REFUNDING past it is shown as waiting for a person.
	reconcileAfter time.Duration
}

// Module is the console as the deployable lists it.
func Module(o Options) app.Module {
	return app.Module{
		Name: "console",
		Build: func(d app.Deps) (app.Runtime, error) {
			c, err := New(d, o)
			if err != nil {
				return app.Runtime{}, err
			}
			return c.Runtime(), nil
		},
	}
}

// New builds the console from the shared dependencies.
func New(d app.Deps, o Options) (*Console, error) {
	if o.Invariants == nil {
		o.Invariants = invariant.MustRegistry()
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = time.Minute
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.Samples <= 0 {
		o.Samples = 120
	}
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	ocfg, err := order.LoadConfig(d.Config)
	if err != nil {
		return nil, err
	}
	ttl := DefaultSessionTTL
	r := app.NewSettingsReader(d.Config, "console")
	r.Duration("FENCELAB_CONSOLE_SESSION_TTL", &ttl, time.Minute, 30*24*time.Hour)
	if err := r.Err(); err != nil {
		return nil, err
	}
	// The CSRF key derives from the token secret: every replica computes
	// the same token for a session, and nothing new must be configured.
	mac := hmac.New(sha256.New, []byte(d.Config.TokenSecret))
	mac.Write([]byte("fencelab console csrf v1"))
	c := &Console{
		d: d, o: o, log: log, pages: pages, csrfKey: mac.Sum(nil),
		checks:         newChecker(d.Pool, o.Invariants, o.CheckEvery),
		sessions:       &sessionStore{pool: d.Pool, ttl: ttl},
		runs:           o.Runner,
		samples:        newSampler(o.Samples),
		reconcileAfter: ocfg.ReconcileAfter,
	}
	c.stepping = newSteppingStore(runnerStepper(o.Runner))
	return c, nil
}

// Runtime is the console's part of one process: its routes, the charts'
// sampler, the sessions' retention purge and, when it has a runner, the
// task that removes the lab's scratch cluster when the process stops.
func (c *Console) Runtime() app.Runtime {
	r := app.Runtime{Routes: c.routes, Tasks: []app.Task{{Name: "console-sampler", Run: c.sample}},
		Kinds: []claim.Kind{claim.RetentionKind(PurgeKindName, c.sessions.ttl, func(ctx context.Context) (any, error) {
			n, err := c.sessions.purge(ctx)
			return claim.Deleted(n), err
		})}}
	if c.runs != nil {
		r.Tasks = append(r.Tasks, app.Task{Name: "console-lab", Run: func(ctx context.Context) error {
			// Idle stepping sessions end here; every session ends before
			// the scratch cluster they live on is removed.
			_ = c.stepping.run(ctx)
			c.runs.Close()
			return nil
		}})
	}
	return r
}

func static() fs.FS {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(fmt.Sprintf("console: embedded static: %v", err))
	}
	return sub
}
