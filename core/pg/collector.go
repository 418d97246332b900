package pg

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// CollectorUp is a scrape-time collector's health: one
// fencelab_collector_up{collector=name} gauge (1 when its last scrape's
// queries succeeded, 0 when one failed) and a log line for every failure.
// A collector that cannot read the database must say so, not go quiet:
// a missing series looks like an empty queue.
type CollectorUp struct {
	name string
	desc *prometheus.Desc
	log  *slog.Logger
}

// NewCollectorUp returns the health gauge of the collector called name.
func NewCollectorUp(name string, log *slog.Logger) *CollectorUp {
	if log == nil {
		log = slog.Default()
	}
	return &CollectorUp{name: name, log: log, desc: prometheus.NewDesc("fencelab_collector_up",
		"1 if the collector's scrape-time queries succeeded, 0 if one failed (the error is logged).",
		nil, prometheus.Labels{"collector": name})}
}

// Describe sends the gauge's descriptor.
func (u *CollectorUp) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

// Report sends the gauge for this scrape: 0 and a log line if any of errs
// is non-nil.
func (u *CollectorUp) Report(ch chan<- prometheus.Metric, errs ...error) {
	v := 1.0
	for _, err := range errs {
		if err != nil {
			v = 0
			u.log.Error("metrics collector failed", "collector", u.name, "err", err)
		}
	}
	ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, v)
}
