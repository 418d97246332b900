// Package promx holds the one rule for a component's Prometheus series:
// they belong to an instance and are registered on the registry its
// caller passes in (the process's, or a test's own), never on a global.
package promx

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it. When reg already holds a
// collector with the same descriptors — a second instance of the
// component in one process: every outbox runner, one idempotency store
// per module — it returns that collector, so the instances add to one
// series instead of failing. A nil reg leaves c unregistered: counted,
// not exported.
//
// Any other refusal (the same name with other labels or help) is a
// programming mistake and panics, as prometheus.MustRegister does.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("promx: register %T: %v", c, err))
}

// Counter registers the counter name on reg (as Register does: shared
// with an instance already registered there, unregistered for a nil reg).
// Counter, CounterVec, Gauge, GaugeFunc, Histogram and HistogramVec are the one way a component declares
// a series: name, help, labels (and buckets), nothing else differs
// between them.
func Counter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	return Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec registers the counter name, partitioned by labels, on reg.
func CounterVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.CounterVec {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge registers the gauge name on reg, set by its component.
func Gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	return Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// GaugeFunc registers the gauge name on reg, read by calling value at
// scrape time.
func GaugeFunc(reg prometheus.Registerer, name, help string, value func() float64) prometheus.GaugeFunc {
	return Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

// Histogram registers the histogram name, with buckets, on reg.
func Histogram(reg prometheus.Registerer, name, help string, buckets []float64) prometheus.Histogram {
	return Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec registers the histogram name, with buckets and partitioned
// by labels, on reg.
func HistogramVec(reg prometheus.Registerer, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

// Value reads a counter or gauge from g as /metrics would serve it: the
// sum of the samples of name carrying every name/value pair in labels (one
// sample when labels name a series). ok is false when no sample matches.
func Value(g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool, err error) {
	fams, err := g.Gather()
	if err != nil {
		return 0, false, fmt.Errorf("promx: gather: %w", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue samples
				}
			}
			if c := m.GetCounter(); c != nil {
				v += c.GetValue()
			} else {
				v += m.GetGauge().GetValue()
			}
			ok = true
		}
	}
	return v, ok, nil
}
