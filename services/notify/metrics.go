package notify

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

type metrics struct {
	calls *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{calls: promx.CounterVec(reg, "fencelab_notify_calls_total",
		"Calls to notification channels, by channel, op (send, query) and outcome (success, failed, unknown).", "channel", "op", "outcome")}
	return m, nil
}

func (m *metrics) call(channel, op, outcome string) {
	m.calls.WithLabelValues(channel, op, outcome).Inc()
}
