package shortlink

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

// metrics are the module's Prometheus series.
type metrics struct {
	reg                prometheus.Registerer
	lookups            *prometheus.CounterVec
	hit, negHit, miss  prometheus.Counter
	dropped            *prometheus.CounterVec
	droppedQueueFull   prometheus.Counter
	droppedWriteFailed prometheus.Counter
	dropsUnattributed  prometheus.Counter
	written            prometheus.Counter
	batchRetries       prometheus.Counter
	invalidations      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, queue func() int, cacheLen func() int) *metrics {
	m := &metrics{
		reg: reg,
		lookups: promx.CounterVec(reg, "fencelab_shortlink_cache_lookups_total",
			"Redirect lookups by result: hit, negative_hit (cached unknown code) or miss (read from the database).", "result"),
		dropped: promx.CounterVec(reg, "fencelab_shortlink_clicks_dropped_total",
			"Clicks not recorded, by reason: queue_full or write_failed (SL-I4: every drop is counted).", "reason"),
		dropsUnattributed: promx.Counter(reg, "fencelab_shortlink_clicks_dropped_unattributed_total",
			"Dropped clicks counted here only, because too many links had drops pending a flush."),
		written: promx.Counter(reg, "fencelab_shortlink_clicks_written_total",
			"Clicks written by the batch writer."),
		batchRetries: promx.Counter(reg, "fencelab_shortlink_click_batch_retries_total",
			"Click batches tried again after a failed attempt."),
		invalidations: promx.Counter(reg, "fencelab_shortlink_cache_invalidations_total",
			"Cache invalidations received through LISTEN/NOTIFY."),
	}
	m.hit, m.negHit, m.miss = m.lookups.WithLabelValues("hit"), m.lookups.WithLabelValues("negative_hit"), m.lookups.WithLabelValues("miss")
	m.droppedQueueFull, m.droppedWriteFailed = m.dropped.WithLabelValues(dropQueueFull), m.dropped.WithLabelValues(dropWriteFailed)
	promx.GaugeFunc(reg, "fencelab_shortlink_click_queue_depth",
		"Clicks waiting for the batch writer.", func() float64 { return float64(queue()) })
	promx.GaugeFunc(reg, "fencelab_shortlink_cache_entries",
		"Entries in the redirect caches (known and unknown codes), expired ones included.", func() float64 { return float64(cacheLen()) })
	return m
}
