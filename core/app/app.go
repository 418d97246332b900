// Package app assembles modules into the one deployable: their routes on one
// echo instance, their background tasks in one runner, their job kinds in
// one claim engine, their invariants in one registry and their error
// mappings in one table. `serve`, `worker`, `dev`, every bench and the e2e
// tests build the process through Build, so what the tests exercise and the
// benches measure is what runs.
package app

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
)

// Deps are the process-wide things a module is built from.
type Deps struct {
	Config  Config
	Pool    *pgxpool.Pool
	Log     *slog.Logger
	Metrics *prometheus.Registry
	Auth    *httpx.Auth
	Faults  *faults.Set // nil in production: every fault point is a no-op
	// Jobs is the claim engine: modules enqueue with Jobs.Enqueue(ctx, tx, …)
	// inside their own transactions; the worker pool runs every module's Kinds.
	Jobs *claim.Client
	// Presence is the process's own database session, named as the owner
	// of every idempotency key the process claims: when the process dies
	// or the database fails over, a retry elsewhere takes its keys over at
	// once (IDEM-I1). nil outside a built process: keys wait out their lock.
	Presence *idem.Presence
}

// Registerer is where a service registers its metrics: the process's
// registry, or a private one when d has none (a service built alone, a
// unit test), so every constructor registers the same way.
func (d Deps) Registerer() prometheus.Registerer {
	if d.Metrics == nil {
		return prometheus.NewRegistry()
	}
	return d.Metrics
}

// Logger is d.Log, or slog.Default() when d has none.
func (d Deps) Logger() *slog.Logger {
	if d.Log == nil {
		return slog.Default()
	}
	return d.Log
}

// Keys returns an idempotency-key store for a module's routes, on the
// process's pool, fault points and metrics (the stores of one process
// share the idem series).
func (d Deps) Keys() *idem.Keys {
	return idem.NewKeys(d.Pool, idem.Options{Faults: d.Faults, Metrics: d.Registerer(), Presence: d.Presence})
}

// NewMetrics returns a registry with the Go, process and pool collectors.
func NewMetrics(pool *pgxpool.Pool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	promx.Register(reg, collectors.NewGoCollector())
	promx.Register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pool != nil {
		promx.Register(reg, pg.NewPoolCollector(pool, "main"))
	}
	return reg
}

// Task is a named background loop. Run returns when ctx ends; an error
// before that is logged and the task restarted with backoff, so one
// failing loop cannot take the process down.
type Task struct {
	Name string
	Run  func(ctx context.Context) error
}

// HTTP builds the echo instance with health, readiness, metrics and
// every module's routes, answering errors with the process's error table.
func (p *Process) HTTP() *echo.Echo {
	d := p.Deps
	var large []string
	for _, m := range p.Mods {
		large = append(large, m.LargeBodyPrefixes...)
	}
	hs, err := LoadHTTPSettings(d.Config)
	if err != nil && d.Log != nil {
		d.Log.Error("http settings: using defaults", "err", err) // Validate refuses to start with them
	}
	var reg prometheus.Registerer
	if d.Metrics != nil {
		reg = d.Metrics
	}
	e := httpx.New(httpx.Options{
		Log: d.Log, Metrics: reg, AccessLog: d.Config.AccessLog, Errors: p.Errors,
		BodyTimeout: hs.BodyTimeout, LargeBodyTimeout: hs.LargeBodyTimeout,
		Admission: httpx.NewLimiter(httpx.LimiterOptions{
			Name: "write", Limit: hs.AdmissionLimit, WaitLine: hs.AdmissionWaitLine,
			MaxWait: hs.AdmissionMaxWait, Metrics: reg,
		}),
		BodyLimitSkip: func(c echo.Context) bool {
			for _, p := range large {
				if strings.HasPrefix(c.Request().URL.Path, p) {
					return true
				}
			}
			return false
		},
	})
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", func(c echo.Context) error { return readyz(c, d) })
	if d.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Metrics, promhttp.HandlerOpts{})))
	}
	for _, m := range p.Mods {
		if m.Routes != nil {
			m.Routes(e)
		}
	}
	segments := RouteSegments(e)
	for _, m := range p.Mods {
		if m.Mounted != nil {
			m.Mounted(segments)
		}
	}
	return e
}

// RouteSegments returns the first path segment of every route on e, lower
// case, sorted and once each: "points" for /points/accounts/:id, "s" for
// /s/:code. Parameters and wildcards name no segment.
func RouteSegments(e *echo.Echo) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range e.Routes() {
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.Path, "/"), "/")
		seg = strings.ToLower(seg)
		if seg == "" || strings.ContainsAny(seg, ":*") || seen[seg] {
			continue
		}
		seen[seg] = true
		out = append(out, seg)
	}
	slices.Sort(out)
	return out
}

// RunTasks runs every module's tasks until ctx ends and waits for them.
func (p *Process) RunTasks(ctx context.Context) { RunTasks(ctx, p.Deps.Log, p.Mods) }

// RunTasks runs the tasks of mods until ctx ends and waits for them (a
// worker dedicated to some tasks passes a subset).
func RunTasks(ctx context.Context, log *slog.Logger, mods []Running) {
	var wg sync.WaitGroup
	for _, m := range mods {
		for _, t := range m.Tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				superviseTask(ctx, log.With("module", m.Name, "task", t.Name), t)
			}()
		}
	}
	wg.Wait()
}

func superviseTask(ctx context.Context, log *slog.Logger, t Task) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := t.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		log.Error("background task stopped; restarting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// ConsumerTask runs the outbox consumer c in this process as a background
// task. Every process that runs it competes for the consumer's lease; one
// applies events at a time.
func ConsumerTask(d Deps, c outbox.Consumer) (Task, error) {
	r, err := outbox.NewRunner(d.Pool, c, outbox.Options{Faults: d.Faults, Log: d.Log, Metrics: d.Registerer()})
	if err != nil {
		return Task{}, err
	}
	return Task{Name: "outbox:" + c.Name, Run: r.Run}, nil
}
