package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
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
// purge, a periodic claim job (one run per slot across all processes).
// Modules build their own Keys with New.
func Module(d app.Deps) (app.Module, error) {
	if d.Metrics != nil {
		for _, c := range []prometheus.Collector{requests, purged} {
			if err := d.Metrics.Register(c); err != nil {
				return app.Module{}, fmt.Errorf("idem: register metrics: %w", err)
			}
		}
	}
	retention := DefaultRetention
	r := app.NewSettingsReader(d.Config, "idem")
	r.Duration("FENCELAB_IDEM_RETENTION", &retention, time.Minute, 366*24*time.Hour)
	if err := r.Err(); err != nil {
		return app.Module{}, err
	}
	return app.Module{
		Name: "idem",
		Kinds: []claim.Kind{{Name: "idem.purge", Every: min(retention/24, 10*time.Minute),
			Handle: func(ctx context.Context, j *claim.Job) error {
				n, err := Purge(ctx, d.Pool, retention)
				if err == nil {
					err = j.SetResult(map[string]int64{"deleted": n})
				}
				return err
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
	var total int64
	for {
		tag, err := db.Exec(ctx, sqlPurge, retention.Microseconds(), PurgeBatch)
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
