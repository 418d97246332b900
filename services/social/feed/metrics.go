package feed

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

// metrics are the service's series, registered on the registry NewService
// is given (promx.Register).
type metrics struct {
	pages, late *prometheus.CounterVec
	fanout      *prometheus.HistogramVec
	settleDelay prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		pages: promx.CounterVec(reg, "fencelab_social_feed_pages_total",
			"Home-feed pages served, by read strategy.", "strategy"),
		late: promx.CounterVec(reg, "fencelab_social_feed_late_posts_total",
			"Posts served as late arrivals (settled after the previous page, inside the range already scrolled), by read strategy.", "strategy"),
		fanout: promx.HistogramVec(reg, "fencelab_social_feed_fanout_rows",
			"Inbox rows written when a post settles, by the fan-out strategy in force.",
			[]float64{0, 1, 10, 100, 1000, 10000, 100000, 1000000}, "strategy"),
		settleDelay: promx.Histogram(reg, "fencelab_social_feed_settle_delay_seconds",
			"Time from a post's creation to its settling (in feeds, fanned out).",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}),
	}
}
