package like

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

// metrics are the service's series, registered on the registry NewService
// is given (promx.Register).
type metrics struct {
	clicks, events *prometheus.CounterVec
	recomputed     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		clicks: promx.CounterVec(reg, "fencelab_social_like_clicks_total",
			"Like and unlike requests that reached the facts, by operation and whether they changed the fact (a repeated click does not).", "op", "changed"),
		events: promx.CounterVec(reg, "fencelab_social_like_counter_events_total",
			"Like events the counter consumed: added to a count, or skipped because a recompute had counted them.", "result"),
		recomputed: promx.Counter(reg, "fencelab_social_like_recomputed_items_total",
			"Item counts rewritten from the facts by a recompute."),
	}
}

func (m *metrics) click(liked, changed bool) {
	op := "unlike"
	if liked {
		op = "like"
	}
	c := "false"
	if changed {
		c = "true"
	}
	m.clicks.WithLabelValues(op, c).Inc()
}

func (m *metrics) applied(added, skipped int) {
	m.events.WithLabelValues("added").Add(float64(added))
	if skipped > 0 {
		m.events.WithLabelValues("counted_by_recompute").Add(float64(skipped))
	}
}
