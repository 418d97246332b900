// Package console is the web console served by the deployable at `/`: the
// book's chapters with their invariants' live status on this database and
// the lab's experiments runnable on scratch databases, and the operator's
// places to look and act — the claim queue, one review inbox for
// everything that waits for a person, outbox consumers, admission gauges.
//
// Pages are server-rendered html/template with embedded assets and no
// script: everything reads with JavaScript off (a running experiment's page
// refreshes itself with <meta http-equiv=refresh>). A person signs in by
// pasting a bearer token; the console keeps it in an HttpOnly,
// SameSite=Strict cookie and every request re-verifies it, so identity
// comes from the verified token only, as on the API.
//
// The console reads across modules, so it sits beside services.go; core/
// never imports it. It owns no table. Actions call what the API already
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
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/services/flashsale/order"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options are what the console cannot build itself: the lab's experiments
// and the environment they run on live above the module list (they start
// the whole deployable), so whoever assembles the process passes them in.
type Options struct {
	// Experiments are the lab's experiments (services.Experiments()).
	Experiments []lab.Experiment
	// NewLab provisions the throwaway environment experiments run on
	// (labenv.NewCluster): never the live database. Nil: experiments are
	// listed but cannot be run from this process.
	NewLab func(ctx context.Context) (lab.Env, func() error, error)
	// MaxRuns bounds experiment runs at once (default 1; each starts a
	// whole deployable on a scratch database); MaxQueued bounds the runs
	// waiting for a slot (default 4). Beyond that a run is refused.
	MaxRuns, MaxQueued int
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
	d       app.Deps
	o       Options
	log     *slog.Logger
	pages   map[string]*pageTemplate
	csrfKey []byte
	api     *echo.Echo // the deployable's own routes, for actions through the API
	checks  *checker
	runs    *runner
	samples *sampler
	gauges  gaugeCache
	// reconcileAfter is the orders' reconciliation delay: an order in
	// PAYING or REFUNDING past it is shown as waiting for a person.
	reconcileAfter time.Duration
}

// New builds the console from the shared dependencies.
func New(d app.Deps, o Options) (*Console, error) {
	if o.MaxRuns <= 0 {
		o.MaxRuns = 1
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = 4
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
	// The CSRF key derives from the token secret: every replica computes
	// the same token for a session, and nothing new must be configured.
	mac := hmac.New(sha256.New, []byte(d.Config.TokenSecret))
	mac.Write([]byte("fencelab console csrf v1"))
	c := &Console{
		d: d, o: o, log: log, pages: pages, csrfKey: mac.Sum(nil),
		checks:         newChecker(d.Pool, o.CheckEvery, log),
		runs:           newRunner(o, log),
		samples:        newSampler(o.Samples),
		reconcileAfter: ocfg.ReconcileAfter,
	}
	return c, nil
}

// Module is the console as the deployable mounts it.
func (c *Console) Module() app.Module {
	return app.Module{
		Name:   "console",
		Routes: c.routes,
		Tasks:  []app.Task{{Name: "console-sampler", Run: c.sample}},
	}
}

// Close stops runs in flight and removes the lab's scratch environment.
func (c *Console) Close() { c.runs.close() }

func static() fs.FS {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(fmt.Sprintf("console: embedded static: %v", err))
	}
	return sub
}
