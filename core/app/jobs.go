package app

import (
	"context"
	"sync"

	"github.com/fencelab/fencelab/core/claim"
)

// RunJobs runs the claim engine's background work until ctx ends: one
// worker pool over every registered kind (o.Workers goroutines, default
// Config.Workers) and one recovery loop (expired leases, unknown jobs) with
// its own small budget. With o.ExitWhenIdle it returns once the pool runs
// dry. Config.Workers = 0 runs nothing: a process that only serves HTTP.
func (p *Process) RunJobs(ctx context.Context, o claim.PoolOptions) error {
	d := p.Deps
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
