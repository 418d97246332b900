package outbox

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
)

// LagCollector reads every consumer's lag from the database on scrape, so
// any process's /metrics shows every consumer, running or not. The
// process registers it once (services/ops); the runners register their
// own counters (Options.Metrics).
func LagCollector(pool *pgxpool.Pool, log *slog.Logger) prometheus.Collector {
	series := func(name, help string, t prometheus.ValueType, v func(ConsumerStatus) float64) pg.RowSeries[ConsumerStatus] {
		return pg.RowSeries[ConsumerStatus]{Name: "fencelab_outbox_" + name, Help: help, Type: t, Value: v}
	}
	return pg.NewRowsCollector(pg.RowsCollectorOptions[ConsumerStatus]{
		Name:    "outbox_lag",
		UpName:  "fencelab_outbox_status_up",
		UpHelp:  "1 if the outbox status query succeeded.",
		Label:   "consumer",
		LabelOf: func(s ConsumerStatus) string { return s.Name },
		Read:    func(ctx context.Context) ([]ConsumerStatus, error) { return Statuses(ctx, pool) },
		Series: []pg.RowSeries[ConsumerStatus]{
			series("lag_events", "Events on the consumer's topics after its position (saturates at 100000 per topic).",
				prometheus.GaugeValue, func(s ConsumerStatus) float64 { return float64(s.LagEvents) }),
			series("lag_seconds", "Age, on the database clock, of the first event after the consumer's position (0 when caught up).",
				prometheus.GaugeValue, func(s ConsumerStatus) float64 { return s.LagSeconds }),
			series("consumer_processed", "Events the consumer has applied, as its row counts them.",
				prometheus.CounterValue, func(s ConsumerStatus) float64 { return float64(s.Processed) }),
			series("consumer_fence", "The consumer lease's current fence.",
				prometheus.GaugeValue, func(s ConsumerStatus) float64 { return float64(s.Fence) }),
		},
		Log: log,
	})
}

// runnerMetrics are one runner's series, labelled with its consumer and
// counted by the process that runs it. The vectors are registered on
// Options.Metrics and shared by every runner of the process
// (promx.Register).
type runnerMetrics struct {
	applied, redelivered, acquired, lost prometheus.Counter
	batch                                prometheus.Observer
}

func newRunnerMetrics(reg prometheus.Registerer, consumer string) runnerMetrics {
	counter := func(name, help string) prometheus.Counter {
		return promx.CounterVec(reg, name, help, "consumer").WithLabelValues(consumer)
	}
	batch := promx.HistogramVec(reg, "fencelab_outbox_batch_seconds", "Duration of committed consumer batches.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}, "consumer")
	return runnerMetrics{
		applied:     counter("fencelab_outbox_applied_total", "Events applied by this process's runners (redeliveries excluded)."),
		redelivered: counter("fencelab_outbox_redelivered_total", "Events read again and skipped because the inbox already had them."),
		acquired:    counter("fencelab_outbox_lease_acquired_total", "Consumer leases acquired by this process."),
		lost:        counter("fencelab_outbox_lease_lost_total", "Batches refused because the lease had expired or been taken over."),
		batch:       batch.WithLabelValues(consumer),
	}
}
