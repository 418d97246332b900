package rel

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
)

// metrics are the service's series, registered on the registry NewService
// is given (promx.Register). The views' lag is read on scrape instead
// (lagCollector).
type metrics struct {
	changes, access *prometheus.CounterVec
	applyDelay      *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		changes: promx.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelab_social_relation_changes_total",
			Help: "Truth-table row changes (each wrote one social.rel event), by operation.",
		}, []string{"op"})),
		access: promx.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelab_social_access_checks_total",
			Help: "Single-post AccessCheck decisions, by result (allowed, denied).",
		}, []string{"result"})),
		applyDelay: promx.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencelab_social_view_apply_delay_seconds",
			Help:    "Time from a relation change to its application in a derived view.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"view"})),
	}
}

func (m *metrics) checked(ok bool) {
	if ok {
		m.access.WithLabelValues("allowed").Inc()
	} else {
		m.access.WithLabelValues("denied").Inc()
	}
}

// lagCollector reads every declared view's lag on scrape (REL-I4: the lag
// is measured and exposed next to its declared bound).
type lagCollector struct {
	pool                        *pgxpool.Pool
	events, seconds, maxLag, up *prometheus.Desc
	health                      *pg.CollectorUp
}

func newLagCollector(pool *pgxpool.Pool, log *slog.Logger) *lagCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("fencelab_social_view_"+name, help, []string{"view"}, nil)
	}
	return &lagCollector{
		pool:    pool,
		health:  pg.NewCollectorUp("social_view_lag", log),
		events:  d("lag_events", "Relation events the view's consumer has not applied."),
		seconds: d("lag_seconds", "Age of the oldest relation event the view has not applied (0 when caught up)."),
		maxLag:  d("max_lag_seconds", "The view's declared lag bound (social_view.max_lag)."),
		up:      prometheus.NewDesc("fencelab_social_view_status_up", "1 if the view lag query succeeded.", nil, nil),
	}
}

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{l.events, l.seconds, l.maxLag, l.up} {
		ch <- d
	}
	l.health.Describe(ch)
}

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lags, err := ViewLags(ctx, l.pool)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(l.up, prometheus.GaugeValue, 0)
		l.health.Report(ch, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(l.up, prometheus.GaugeValue, 1)
	l.health.Report(ch)
	for _, v := range lags {
		ch <- prometheus.MustNewConstMetric(l.events, prometheus.GaugeValue, float64(v.Events), v.View)
		ch <- prometheus.MustNewConstMetric(l.seconds, prometheus.GaugeValue, v.Seconds, v.View)
		ch <- prometheus.MustNewConstMetric(l.maxLag, prometheus.GaugeValue, v.MaxLagSeconds, v.View)
	}
}
