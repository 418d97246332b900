// Package report is the distributed-lock chapter's demo: a daily report job
// that any number of instances run, where only the current lease holder may
// write the day's report — and where a holder that stalled past its expiry
// is refused by the report itself (lease.Guard), not by its own checks.
package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/promx"
)

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "fencelab"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Service runs the report job and reads reports.
type Service struct {
	db     *pgxpool.Pool
	leases *lease.Manager
	out    Output
	faults *faults.Set
	log    *slog.Logger
	cfg    Config
	runs   *prometheus.CounterVec
}

// NewService builds the job for one instance from the shared dependencies
// and its settings (loadConfig).
func NewService(d app.Deps, cfg Config) (*Service, error) {
	if cfg.Holder == "" {
		cfg.Holder = defaultHolder()
	}
	if cfg.TTL == 0 {
		cfg.TTL = defaultTTL
	}
	if cfg.Interval == 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.Retention == 0 {
		cfg.Retention = defaultRetention
	}
	if cfg.TTL < lease.MinTTL || cfg.TTL > lease.MaxTTL {
		return nil, fmt.Errorf("report: ttl must be between %s and %s, got %s", lease.MinTTL, lease.MaxTTL, cfg.TTL)
	}
	if cfg.Interval < minInterval || cfg.Interval > 24*time.Hour {
		return nil, fmt.Errorf("report: interval must be between %s and 24h, got %s", minInterval, cfg.Interval)
	}
	if cfg.Retention < minRetention || cfg.Retention > maxRetention {
		return nil, fmt.Errorf("report: retention must be between %s and %s, got %s", minRetention, maxRetention, cfg.Retention)
	}
	if err := lease.CheckName("report holder", cfg.Holder); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if cfg.Output == nil {
		cfg.Output = FencedOutput{DB: d.Pool}
	}
	runs := promx.CounterVec(d.Registerer(), "fencelab_report_runs_total",
		"Daily report job runs by outcome (written, already_written, held, lost, stale_fence, error).", "outcome")
	return &Service{db: d.Pool, leases: lease.New(d.Pool), out: cfg.Output, faults: d.Faults,
		log: d.Logger().With("module", "report", "holder", cfg.Holder), cfg: cfg, runs: runs}, nil
}

// Holder is this instance's identity in the lease.
func (s *Service) Holder() string { return s.cfg.Holder }

// Get returns the stored report for day (ErrNoReport if none).
func (s *Service) Get(ctx context.Context, day time.Time) (Report, error) {
	return get(ctx, s.db, day)
}

// Run produces day's report once, if this instance can get the lease:
//
//  1. skip if the report exists (a cheap look that saves a grant);
//  2. acquire the day's lease (lease.ErrHeld: another instance is on it);
//  3. look again under the lease, then compute;
//  4. the pre-write check: renew the lease, proving it is still ours by
//     the database clock (lease.ErrLost otherwise);
//  5. the fault point faults.BeforeWrite: the chapter's stall happens here,
//     after every check the instance can make;
//  6. write through the Output, whose guard refuses the write with
//     lease.ErrStaleFence if a newer holder has written in the meantime.
//
// Step 4 is what most lease code stops at. It cannot help: an instance
// that stalls between 4 and 6 resumes straight into the write. Step 6 is
// the guarantee.
//
// The job runs no lease.Watchdog: it is short next to its TTL, and a
// watchdog stalls with its process anyway. (In the experiments, where only
// this goroutine pauses, a watchdog would cancel the run before the write
// and hide the very refusal they demonstrate.)
func (s *Service) Run(ctx context.Context, day time.Time) (Report, error) {
	if done, err := exists(ctx, s.db, day); err != nil {
		return Report{}, err
	} else if done {
		return Report{}, ErrAlreadyWritten
	}
	l, err := s.leases.Acquire(ctx, LeaseName(day), s.cfg.Holder, s.cfg.TTL)
	if err != nil {
		return Report{}, err
	}
	defer s.release(ctx, l)

	// Another instance may have finished between our look and our grant.
	if done, err := exists(ctx, s.db, day); err != nil {
		return Report{}, err
	} else if done {
		return Report{}, ErrAlreadyWritten
	}
	grants, err := grantsOn(ctx, s.db, day)
	if err != nil {
		return Report{}, err
	}
	r := Report{Date: day, Content: fmt.Sprintf(
		"Daily report for %s: %d lease grants recorded that day. Computed by %s under fence %d.",
		day.Format(DateLayout), grants, l.Holder, l.Fence)}

	if l, err = s.leases.Renew(ctx, l); err != nil {
		return Report{}, err
	}
	if err := s.faults.Hit(ctx, faults.BeforeWrite, l.Name); err != nil {
		return Report{}, err
	}
	return s.out.Write(ctx, l, r)
}

// release gives the lease back on the way out so the next instance need not
// wait for the TTL. Losing it first (ErrLost) is expected after a stall.
func (s *Service) release(ctx context.Context, l lease.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.leases.Release(rctx, l); err != nil && !errors.Is(err, lease.ErrLost) {
		s.log.Warn("report: release failed; the lease will expire on its own", "lease", l.Name, "fence", l.Fence, "err", err)
	}
}

// task is the background job `serve` and `worker` run: every interval,
// produce the day's report if nobody has yet.
func (s *Service) task() app.Task {
	return app.Task{Name: "daily-report", Run: s.loop}
}

func (s *Service) loop(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.runOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Service) runOnce(ctx context.Context) {
	day := s.cfg.Date
	if day.IsZero() {
		var err error
		if day, err = today(ctx, s.db); err != nil {
			if ctx.Err() == nil {
				s.log.Error("report: cannot read today's date", "err", err)
				s.count("error")
			}
			return
		}
	}
	r, err := s.Run(ctx, day)
	date := day.Format(DateLayout)
	switch {
	case err == nil:
		s.log.Info("report written", "date", date, "fence", r.Fence)
		s.count("written")
	case errors.Is(err, ErrAlreadyWritten):
		s.count("already_written")
	case errors.Is(err, lease.ErrHeld):
		s.log.Debug("report lease held by another instance", "date", date)
		s.count("held")
	case errors.Is(err, lease.ErrStaleFence):
		s.log.Warn("report write refused: stale fence", "date", date, "err", err)
		s.count("stale_fence")
	case errors.Is(err, lease.ErrLost):
		s.log.Warn("report lease lost before the write", "date", date, "err", err)
		s.count("lost")
	case ctx.Err() != nil:
	default:
		s.log.Error("report run failed", "date", date, "err", err)
		s.count("error")
	}
}

func (s *Service) count(outcome string) { s.runs.WithLabelValues(outcome).Inc() }

// purgeKindName is the periodic kind that enforces Config.Retention.
const purgeKindName = "report.purge"

// purgeKind is report.purge: one run per slot across all processes,
// deleting whole report days past the retention (Purge).
func (s *Service) purgeKind() claim.Kind {
	return claim.RetentionKind(purgeKindName, s.cfg.Retention, func(ctx context.Context) (any, error) {
		return Purge(ctx, s.db, s.cfg.Retention)
	})
}
