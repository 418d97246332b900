package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
)

// NewJobs builds the process's claim client (Deps.Jobs).
func NewJobs(pool *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer, fs *faults.Set) *claim.Client {
	return claim.NewClient(pool, claim.Options{Log: log, Metrics: reg, Faults: fs})
}

// RegisterKinds registers every module's job kinds with d.Jobs (services.All
// calls it once the modules are built).
func RegisterKinds(d Deps, mods []Module) error {
	if d.Jobs == nil {
		return nil
	}
	for _, m := range mods {
		if err := d.Jobs.Register(m.Kinds...); err != nil {
			return err
		}
	}
	return nil
}

// RunJobs runs the claim engine's background work until ctx ends: one
// worker pool over every registered kind (o.Workers goroutines, default
// Config.Workers) and one recovery loop (expired leases, unknown jobs) with
// its own small budget. With o.ExitWhenIdle it returns once the pool runs
// dry. Config.Workers = 0 runs nothing: a process that only serves HTTP.
func RunJobs(ctx context.Context, d Deps, o claim.PoolOptions) error {
	if d.Jobs == nil {
		return nil
	}
	if o.Workers == 0 {
		o.Workers = d.Config.Workers
	}
	if o.Workers <= 0 {
		<-ctx.Done()
		return nil
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = d.Config.ShutdownGrace
	}
	recCtx, stopRecovery := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.Jobs.RunRecovery(recCtx, claim.RecoveryOptions{}) })
	err := d.Jobs.Work(ctx, o)
	stopRecovery()
	wg.Wait()
	return err
}

// EnvClaimRetention is how long finished jobs and their history are kept
// (default claim.DefaultRetention).
const EnvClaimRetention = "FENCELAB_CLAIM_RETENTION"

// JobsModule is the claim engine's own housekeeping as a module: the
// claim.purge periodic kind, which deletes finished jobs (and their
// job_event rows) older than FENCELAB_CLAIM_RETENTION, kinds registered
// with KeepFinished excepted (docs/DATA.md).
func JobsModule(d Deps) (Module, error) {
	retention := claim.DefaultRetention
	r := NewSettingsReader(d.Config, "claim")
	r.Duration(EnvClaimRetention, &retention, time.Hour, 366*24*time.Hour)
	if err := r.Err(); err != nil {
		return Module{}, err
	}
	m := Module{Name: "claim"}
	if d.Jobs != nil {
		m.Kinds = []claim.Kind{d.Jobs.PurgeKind(retention)}
	}
	return m, nil
}
