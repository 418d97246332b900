package lease_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

// lease/watchdog-keeps-alive: a task twice as long as its lease keeps it.
func TestWatchdogKeepsALongTaskAlive(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, report.WatchdogKeepsAlive)
}

// lease/watchdog-cancels-on-loss: a lost lease cancels the watched task.
func TestWatchdogCancelsOnLoss(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, report.WatchdogCancelsOnLoss)
}
