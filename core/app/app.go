// Package app assembles modules into the one deployable: their routes on one
// echo instance, their background tasks in one runner, their demo seeds.
// `serve`, `worker`, `dev` and the e2e tests all build the process through
// here, so what the tests exercise is what runs.
package app

import (
	"context"
	"log/slog"
	"net/http"
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
	"github.com/fencelab/fencelab/core/pg"
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
}

// NewMetrics returns a registry with the Go, process and pool collectors.
func NewMetrics(pool *pgxpool.Pool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pool != nil {
		reg.MustRegister(pg.NewPoolCollector(pool, "main"))
	}
	return reg
}

// Module is one service (or core demo) as the deployable sees it.
type Module struct {
	Name string
	// Routes mounts the module's HTTP routes.
	Routes func(e *echo.Echo)
	// Tasks are background loops run by `serve` and `worker`.
	Tasks []Task
	// Seed writes the module's demo data for `dev`; it must be idempotent.
	Seed func(ctx context.Context) error
	// LargeBodyPrefixes are route prefixes that enforce their own body
	// limits (uploads) and skip the global JSON limit.
	LargeBodyPrefixes []string
	// Kinds are the module's durable job kinds (claim engine), periodic
	// ones included; `serve`, `dev` and `worker` run them (see RunJobs).
	Kinds []claim.Kind
}

// Task is a named background loop. Run returns when ctx ends; an error
// before that is logged and the task restarted with backoff, so one
// failing loop cannot take the process down.
type Task struct {
	Name string
	Run  func(ctx context.Context) error
}

// NewHTTP builds the echo instance with health, readiness, metrics and
// every module's routes.
func NewHTTP(d Deps, mods []Module) *echo.Echo {
	var large []string
	for _, m := range mods {
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
		Log: d.Log, Metrics: reg, AccessLog: d.Config.AccessLog,
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
	for _, m := range mods {
		if m.Routes != nil {
			m.Routes(e)
		}
	}
	if d.Jobs != nil && d.Auth != nil {
		d.Jobs.Routes(e, d.Auth) // GET /jobs/{id} (admin)
	}
	return e
}

// RunTasks runs every module's tasks until ctx ends and waits for them.
func RunTasks(ctx context.Context, log *slog.Logger, mods []Module) {
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
