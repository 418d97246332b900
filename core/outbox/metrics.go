package outbox

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the outbox's metrics: runner counters, and — with a pool —
// every consumer's lag read from the database on scrape. The process
// registers them once (services/ops).
func Collectors(pool *pgxpool.Pool, log *slog.Logger) []prometheus.Collector {
	cs := []prometheus.Collector{metricApplied, metricRedelivered, metricAcquired, metricLost, metricBatch}
	if pool != nil {
		cs = append(cs, newLagCollector(pool, log))
	}
	return cs
}
