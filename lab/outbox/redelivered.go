package outbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
)

// Redelivered reads fencelab_outbox_redelivered_total for consumer from
// reg (the registry a runner was given as Options.Metrics): the events the
// runner read again and the inbox refused, counted by the consumer's own
// apply path. It is how an experiment observes a redelivery itself — the
// applied count stays the same whether the inbox refused ten events or the
// stream was never read again.
func Redelivered(t lab.T, reg *prometheus.Registry, consumer string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "fencelab_outbox_redelivered_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}
