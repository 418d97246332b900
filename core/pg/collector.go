package pg

import (
	"context"
	"log/slog"
	"time"

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

// RowSeries is one series a RowsCollector sends per row: its full name,
// help, type, and how a row gives its value.
type RowSeries[T any] struct {
	Name, Help string
	Type       prometheus.ValueType
	Value      func(T) float64
}

// RowsCollectorOptions configure a RowsCollector.
type RowsCollectorOptions[T any] struct {
	// Name is the collector's fencelab_collector_up{collector=Name}.
	Name string
	// UpName and UpHelp name the collector's own 0/1 gauge for the last
	// scrape's read (fencelab_outbox_status_up, …).
	UpName, UpHelp string
	// Label is the one label every series carries, LabelOf its value for
	// a row (a consumer's name, a view's).
	Label   string
	LabelOf func(T) string
	// Read reads the rows; it is given a context bounded by Timeout.
	Read   func(ctx context.Context) ([]T, error)
	Series []RowSeries[T]
	// Timeout bounds one scrape's read (2 s when zero): a scrape must not
	// hang on a sick database.
	Timeout time.Duration
	Log     *slog.Logger
}

// RowsCollector reads rows from the database on every scrape and sends a
// series per row, so any process's /metrics shows every consumer or view,
// whether this process runs it or not. A failed read sends the up gauge at
// 0 and no rows, never a stale or partial value.
type RowsCollector[T any] struct {
	o      RowsCollectorOptions[T]
	up     *prometheus.Desc
	descs  []*prometheus.Desc
	health *CollectorUp
}

// NewRowsCollector builds the collector; register it once per process.
func NewRowsCollector[T any](o RowsCollectorOptions[T]) *RowsCollector[T] {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	c := &RowsCollector[T]{
		o:      o,
		up:     prometheus.NewDesc(o.UpName, o.UpHelp, nil, nil),
		health: NewCollectorUp(o.Name, o.Log),
	}
	for _, s := range o.Series {
		c.descs = append(c.descs, prometheus.NewDesc(s.Name, s.Help, []string{o.Label}, nil))
	}
	return c
}

// Describe sends every descriptor.
func (c *RowsCollector[T]) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	for _, d := range c.descs {
		ch <- d
	}
	c.health.Describe(ch)
}

// Collect reads the rows and sends their series.
func (c *RowsCollector[T]) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
	defer cancel()
	rows, err := c.o.Read(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		c.health.Report(ch, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	c.health.Report(ch)
	for _, r := range rows {
		label := c.o.LabelOf(r)
		for i, s := range c.o.Series {
			ch <- prometheus.MustNewConstMetric(c.descs[i], s.Type, s.Value(r), label)
		}
	}
}
