package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// Collectors are the package's metrics; the process registers them once
// (services/ops).
func Collectors() []prometheus.Collector { return []prometheus.Collector{requests, purged} }

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
