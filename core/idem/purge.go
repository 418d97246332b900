package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
)

// DefaultRetention is how long a key is remembered (the spec's 24 h).
const DefaultRetention = 24 * time.Hour

// metrics are a store's series, registered on Options.Metrics: every
// module builds its own Keys, and the stores of one process share one
// series per name (promx.Register).
type metrics struct {
	// requests counts outcomes per scope: first, replayed, in_flight,
	// reused, takeover, fence_refused, released.
	requests *prometheus.CounterVec
	purged   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: promx.CounterVec(reg, "fencelab_idem_requests_total",
			"Idempotency-Key outcomes by scope: first, replayed, in_flight, reused, takeover, fence_refused, released.", "scope", "outcome"),
		purged: promx.Counter(reg, "fencelab_idem_purged_total",
			"Idempotency records deleted by the retention purge."),
	}
}

func (r *request) count(outcome string) { r.keys.m.requests.WithLabelValues(r.scope, outcome).Inc() }

// PurgeBatch bounds one purge statement, so the purge never holds many
// row locks or a long transaction.
const PurgeBatch = 1000

// Purge deletes the records created more than retention ago (finished
// ones, and in-flight ones whose lock has expired), in batches, and
// returns how many it deleted. A retry after that is a new request.
func (k *Keys) Purge(ctx context.Context, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := k.pool.Exec(ctx, sqlPurge, retention.Microseconds(), PurgeBatch)
		if err != nil {
			return total, fmt.Errorf("idem: purge: %w", pg.MapError(err))
		}
		total += tag.RowsAffected()
		k.m.purged.Add(float64(tag.RowsAffected()))
		if tag.RowsAffected() < PurgeBatch {
			return total, nil
		}
	}
}
