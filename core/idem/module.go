package idem

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/pg"
)

// DefaultRetention is how long a key is remembered (the spec's 24 h).
const DefaultRetention = 24 * time.Hour

// requests counts outcomes per scope: first, replayed, in_flight, reused,
// takeover, fence_refused, released.
var requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencelab_idem_requests_total",
	Help: "Idempotency-Key outcomes by scope: first, replayed, in_flight, reused, takeover, fence_refused, released.",
}, []string{"scope", "outcome"})

var purged = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "fencelab_idem_purged_total",
	Help: "Idempotency records deleted by the retention purge.",
})

func count(scope, outcome string) { requests.WithLabelValues(scope, outcome).Inc() }

// Module is core/idem in the deployable: its metrics and the retention
// purge. Modules build their own Keys with New.
//
// The purge is a plain ticker task for now; when the claim engine's
// periodic jobs land it can call Purge from there instead (Purge is the
// whole job, the ticker is only the schedule).
func Module(d app.Deps) (app.Module, error) {
	if d.Metrics != nil {
		for _, c := range []prometheus.Collector{requests, purged} {
			if err := d.Metrics.Register(c); err != nil {
				return app.Module{}, fmt.Errorf("idem: register metrics: %w", err)
			}
		}
	}
	retention := app.EnvDuration("FENCELAB_IDEM_RETENTION", DefaultRetention)
	if retention < time.Minute {
		return app.Module{}, fmt.Errorf("idem: FENCELAB_IDEM_RETENTION must be at least 1m, got %s", retention)
	}
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	return app.Module{
		Name: "idem",
		Tasks: []app.Task{{Name: "purge", Run: func(ctx context.Context) error {
			return PurgeEvery(ctx, d.Pool, retention, min(retention/24, 10*time.Minute), log)
		}}},
	}, nil
}

// PurgeBatch bounds one purge statement, so the purge never holds many
// row locks or a long transaction.
const PurgeBatch = 1000

// Purge deletes the records created more than retention ago (finished
// ones, and in-flight ones whose lock has expired), in batches, and
// returns how many it deleted. A retry after that is a new request.
func Purge(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	cutoff := time.Now().Add(-retention)
	var total int64
	for {
		tag, err := db.Exec(ctx, sqlPurge, cutoff, PurgeBatch)
		if err != nil {
			return total, fmt.Errorf("idem: purge: %w", pg.MapError(err))
		}
		total += tag.RowsAffected()
		purged.Add(float64(tag.RowsAffected()))
		if tag.RowsAffected() < PurgeBatch {
			return total, nil
		}
	}
}

// PurgeEvery runs Purge now and then every interval until ctx ends.
func PurgeEvery(ctx context.Context, db pg.Querier, retention, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := Purge(ctx, db, retention); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("idem purge failed", "err", err)
		} else if n > 0 {
			log.Info("idem purge", "deleted", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
