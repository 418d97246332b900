package claim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// Recovered is one job RecoverExpired reclaimed.
type Recovered struct {
	ID    int64
	Kind  string
	Fence int64 // the raised fence
	State State // ready or unknown
}

// DefaultRedispatchSpread bounds the jitter RecoverExpired adds to a
// recovered job's due_at.
const DefaultRedispatchSpread = 2 * time.Second

// RecoverExpired reclaims up to batch running jobs whose lease has expired
// (see sqlRecoverExpired): fence raised, owner cleared, side-effecting kinds
// to unknown and the rest to ready, re-dispatch spread over spread (0:
// DefaultRedispatchSpread). Safe to run from any number of processes at once:
// each expired job is recovered by exactly one of them.
func (c *Client) RecoverExpired(ctx context.Context, batch int, spread time.Duration) ([]Recovered, error) {
	if batch <= 0 {
		batch = 100
	}
	if spread <= 0 {
		spread = DefaultRedispatchSpread
	}
	rows, err := c.pool.Query(ctx, sqlRecoverExpired, batch, c.rerunnable(), spread.Microseconds(), c.owner)
	if err != nil {
		return nil, fmt.Errorf("claim: recover expired: %w", pg.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Recovered, error) {
		var x Recovered
		var st string
		err := r.Scan(&x.ID, &x.Kind, &x.Fence, &st)
		x.State = State(st)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: recover expired: %w", pg.MapError(err))
	}
	for _, x := range out {
		c.m.recoveries.WithLabelValues(x.Kind, string(x.State)).Inc()
		if x.State == StateUnknown {
			c.m.unknowns.WithLabelValues(x.Kind).Inc()
		}
	}
	return out, nil
}

// Resolved is the outcome of one unknown job's resolution.
type Resolved struct {
	ID    int64
	Kind  string
	State State // succeeded, ready (failed if no attempts are left) or needs_review
	Err   error // the fenced write's error (ErrStaleFence if the job moved on)
}

// ResolveUnknown settles up to batch due unknown jobs with their kinds'
// authoritative queries, running at most concurrency queries at once: the
// resolver's own budget, separate from the worker pool's, so a wave of
// unknowns after a crash cannot crowd out normal work downstream.
// found → succeeded, absent → ready, no Resolve or a failed query →
// needs_review. Every write is fenced by the fence the resolver took.
func (c *Client) ResolveUnknown(ctx context.Context, batch, concurrency int) ([]Resolved, error) {
	if batch <= 0 {
		batch = 100
	}
	if concurrency <= 0 {
		concurrency = 2
	}
	rows, err := c.pool.Query(ctx, sqlTakeUnknown, batch, c.owner, c.lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("claim: take unknown: %w", pg.MapError(err))
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("claim: take unknown: %w", pg.MapError(err))
	}
	out := make([]Resolved, len(jobs))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = c.resolveOne(ctx, j)
		}()
	}
	wg.Wait()
	return out, nil
}

// settleUnknownStmt is sqlSettleUnknown rewritten to $n once (pg.MustNamed).
var settleUnknownStmt = pg.MustNamed(sqlSettleUnknown)

func (c *Client) resolveOne(ctx context.Context, j *Job) Resolved {
	k, ok := c.Kind(j.Kind)
	verdict, result, detail := "review", (*string)(nil), ""
	switch {
	case !ok:
		detail = "no handler registered for this kind"
	case k.Resolve == nil:
		detail = "kind has no authoritative query"
	default:
		qctx, cancel := context.WithTimeout(ctx, c.lease/2)
		res, err := safeResolve(qctx, k, *j)
		cancel()
		switch {
		case err != nil:
			detail = "cannot query: " + truncate(err.Error(), 2000)
		case res.found:
			verdict, detail = "found", "effect found"
			s := string(res.result)
			result = &s
		default:
			verdict, detail = "absent", "authoritative query found no effect"
		}
	}
	var state string
	err := c.pool.QueryRow(context.WithoutCancel(ctx), settleUnknownStmt.SQL, settleUnknownStmt.Args(pgx.NamedArgs{
		"id":      j.ID,
		"fence":   j.Fence,
		"owner":   j.Owner,
		"verdict": verdict,
		"result":  result,
		"detail":  detail,
	})...).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		c.m.stale.WithLabelValues(j.Kind).Inc()
		return Resolved{ID: j.ID, Kind: j.Kind, Err: fmt.Errorf("%w (job %d, fence %d)", ErrStaleFence, j.ID, j.Fence)}
	}
	if err != nil {
		return Resolved{ID: j.ID, Kind: j.Kind, Err: fmt.Errorf("claim: settle unknown job %d: %w", j.ID, pg.MapError(err))}
	}
	c.m.resolutions.WithLabelValues(j.Kind, verdict).Inc()
	return Resolved{ID: j.ID, Kind: j.Kind, State: State(state)}
}

func safeResolve(ctx context.Context, k Kind, j Job) (res Resolution, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("resolve panicked: %v", r)
		}
	}()
	return k.Resolve(ctx, j)
}

// RecoveryOptions tune RunRecovery.
type RecoveryOptions struct {
	Interval    time.Duration // between sweeps (default 5s, jittered ±20%)
	Batch       int           // rows per statement (default 100)
	Concurrency int           // concurrent authoritative queries (default 2)
	Spread      time.Duration // re-dispatch jitter (default DefaultRedispatchSpread)
}

// RunRecovery sweeps until ctx ends: expired leases in batches until a batch
// comes back short, then due unknown jobs. It holds at most one connection
// for recovery plus Concurrency for resolutions, whatever the pool's size.
func (c *Client) RunRecovery(ctx context.Context, o RecoveryOptions) error {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	for {
		c.sweep(ctx, o)
		jitter := time.Duration(float64(o.Interval) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter):
		}
	}
}

func (c *Client) sweep(ctx context.Context, o RecoveryOptions) {
	for ctx.Err() == nil {
		rec, err := c.RecoverExpired(ctx, o.Batch, o.Spread)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("claim: recovery sweep failed", "err", err)
			}
			return
		}
		if len(rec) > 0 {
			c.log.Info("claim: recovered expired leases", "jobs", len(rec))
		}
		if len(rec) < o.Batch {
			break
		}
	}
	for ctx.Err() == nil {
		res, err := c.ResolveUnknown(ctx, o.Batch, o.Concurrency)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("claim: resolution sweep failed", "err", err)
			}
			return
		}
		if len(res) < o.Batch {
			break
		}
	}
}
