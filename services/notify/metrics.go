package notify

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	calls *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencelab_notify_calls_total",
		Help: "Calls to notification channels, by channel, op (send, query) and outcome (success, failed, unknown).",
	}, []string{"channel", "op", "outcome"})}
	if reg != nil {
		if err := reg.Register(m.calls); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) call(channel, op, outcome string) {
	m.calls.WithLabelValues(channel, op, outcome).Inc()
}
