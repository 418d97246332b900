package like

import "github.com/prometheus/client_golang/prometheus"

var (
	metricClicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencelab_social_like_clicks_total",
		Help: "Like and unlike requests that reached the facts, by operation and whether they changed the fact (a repeated click does not).",
	}, []string{"op", "changed"})
	metricEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencelab_social_like_counter_events_total",
		Help: "Like events the counter consumed: added to a count, or skipped because a recompute had counted them.",
	}, []string{"result"})
	metricRecomputed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencelab_social_like_recomputed_items_total",
		Help: "Item counts rewritten from the facts by a recompute.",
	})
)

func countClick(liked, changed bool) {
	op := "unlike"
	if liked {
		op = "like"
	}
	c := "false"
	if changed {
		c = "true"
	}
	metricClicks.WithLabelValues(op, c).Inc()
}

func countApplied(added, skipped int) {
	metricEvents.WithLabelValues("added").Add(float64(added))
	if skipped > 0 {
		metricEvents.WithLabelValues("counted_by_recompute").Add(float64(skipped))
	}
}

func collectors() []prometheus.Collector {
	return []prometheus.Collector{metricClicks, metricEvents, metricRecomputed}
}
