package rel

import (
	"context"
	"log/slog"

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
		changes: promx.CounterVec(reg, "fencelab_social_relation_changes_total",
			"Truth-table row changes (each wrote one social.rel event), by operation.", "op"),
		access: promx.CounterVec(reg, "fencelab_social_access_checks_total",
			"Single-post AccessCheck decisions, by result (allowed, denied).", "result"),
		applyDelay: promx.HistogramVec(reg, "fencelab_social_view_apply_delay_seconds",
			"Time from a relation change to its application in a derived view.",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "view"),
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
func lagCollector(pool *pgxpool.Pool, log *slog.Logger) prometheus.Collector {
	gauge := func(name, help string, v func(Lag) float64) pg.RowSeries[Lag] {
		return pg.RowSeries[Lag]{Name: "fencelab_social_view_" + name, Help: help, Type: prometheus.GaugeValue, Value: v}
	}
	return pg.NewRowsCollector(pg.RowsCollectorOptions[Lag]{
		Name:    "social_view_lag",
		UpName:  "fencelab_social_view_status_up",
		UpHelp:  "1 if the view lag query succeeded.",
		Label:   "view",
		LabelOf: func(l Lag) string { return l.View },
		Read:    func(ctx context.Context) ([]Lag, error) { return viewLags(ctx, pool) },
		Series: []pg.RowSeries[Lag]{
			gauge("lag_events", "Relation events the view's consumer has not applied.", func(l Lag) float64 { return float64(l.Events) }),
			gauge("lag_seconds", "Age of the oldest relation event the view has not applied (0 when caught up).", func(l Lag) float64 { return l.Seconds }),
			gauge("max_lag_seconds", "The view's declared lag bound (social_view.max_lag).", func(l Lag) float64 { return l.MaxLagSeconds }),
		},
		Log: log,
	})
}
