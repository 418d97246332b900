package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
)

// Process is the assembled deployable: the shared dependencies, every
// module built on them, and the tables built from the module list.
type Process struct {
	Deps       Deps
	Mods       []Running
	Invariants *invariant.Registry
	Errors     *httpx.Errors

	ownPool bool
}

// BuildOptions tune Build; the zero value is what `serve` uses.
type BuildOptions struct {
	// Role names the process in pg_stat_activity ("fencelab-<role>").
	Role string
	// Migrate applies pending migrations before connecting.
	Migrate bool
	// Faults arms fault points (nil in production: every point a no-op).
	Faults *faults.Set
	// Log is the process logger (default: Config.Logger()).
	Log *slog.Logger
	// MinConns opens this many connections up front (benches warm the pool).
	MinConns int32
	// Pool is an open pool to use instead of connecting to
	// Config.DatabaseURL (tests); Close leaves it open.
	Pool *pgxpool.Pool
}

// Build assembles the process from cfg and the module list: the pool, the
// logger, the metrics registry, token auth, the claim engine (Jobs) and
// every module, with their job kinds registered. It is the only place
// Deps are made.
func Build(ctx context.Context, cfg Config, mods []Module, o BuildOptions) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Pool == nil && cfg.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set (or run `fencelab dev`, which provisions one)")
	}
	invs, err := Invariants(mods)
	if err != nil {
		return nil, err
	}
	auth, err := httpx.NewAuth([]byte(cfg.TokenSecret))
	if err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = cfg.Logger()
	}
	if o.Migrate {
		if err := (pg.Migrator{FS: migrations.FS, URL: cfg.DatabaseURL}).Up(); err != nil {
			return nil, err
		}
	}
	p := &Process{Invariants: invs, Errors: Errors(mods)}
	pool := o.Pool
	if pool == nil {
		role := o.Role
		if role == "" {
			role = "serve"
		}
		pool, err = pg.Connect(ctx, cfg.DatabaseURL, pg.PoolOptions{MaxConns: int32(cfg.MaxConns), MinConns: o.MinConns, ApplicationName: "fencelab-" + role})
		if err != nil {
			return nil, err
		}
		p.ownPool = true
	}
	metrics := NewMetrics(pool)
	p.Deps = Deps{
		Config: cfg, Pool: pool, Log: log, Metrics: metrics, Auth: auth, Faults: o.Faults,
		Jobs:     claim.NewClient(pool, claim.Options{Log: log, Metrics: metrics, Faults: o.Faults}),
		Presence: idem.NewPresence(pool),
	}
	// Connect the presence session before serving, so the first keyed
	// request already names an owner. A database that does not answer in
	// time only delays that: claims made meanwhile name no owner and are
	// freed by their lock expiry, as before owners existed.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := p.Deps.Presence.WaitReady(wctx); err != nil {
		log.Warn("idempotency presence session not connected yet; keys claimed meanwhile wait out their lock", "err", err)
	}
	cancel()
	for _, m := range mods {
		r := Running{Module: m}
		if m.Build != nil {
			if r.Runtime, err = m.Build(p.Deps); err != nil {
				p.Close()
				return nil, err
			}
		}
		if err := p.Deps.Jobs.Register(r.Kinds...); err != nil {
			p.Close()
			return nil, err
		}
		p.Mods = append(p.Mods, r)
	}
	return p, nil
}

// Close releases what Build opened.
func (p *Process) Close() {
	p.Deps.Presence.Close()
	if p.ownPool {
		p.Deps.Pool.Close()
	}
}

// Seed runs every module's demo seed, in module order.
func (p *Process) Seed(ctx context.Context) error {
	for _, m := range p.Mods {
		if m.Seed != nil {
			if err := m.Seed(ctx); err != nil {
				return fmt.Errorf("seed %s: %w", m.Name, err)
			}
		}
	}
	return nil
}

// Background runs what `serve` runs beside HTTP — every module's tasks and
// the claim engine's workers and recovery — until ctx ends; wait blocks
// until they have stopped.
func (p *Process) Background(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() { p.RunTasks(ctx) })
	wg.Go(func() { _ = p.RunJobs(ctx, claim.PoolOptions{}) })
	return wg.Wait
}

// Standalone returns Deps for a service built outside a process (unit
// tests): the pool (nil allowed), the default logger, a private metrics
// registry; no auth, no claim engine, no faults. A process is built with
// Build, never from Standalone.
func Standalone(pool *pgxpool.Pool) Deps {
	return Deps{Config: Defaults(), Pool: pool, Log: slog.Default(), Metrics: prometheus.NewRegistry()}
}
