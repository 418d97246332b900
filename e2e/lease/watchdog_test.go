package lease_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	leaselab "github.com/fencelab/fencelab/lab/lease"
)

// lease/watchdog-keeps-alive: a task twice as long as its lease keeps it.
func TestWatchdogKeepsALongTaskAlive(t *testing.T) {
	e2etest.Experiment(t, leaselab.WatchdogKeepsAlive)
}

// lease/watchdog-cancels-on-loss: a lost lease cancels the watched task.
func TestWatchdogCancelsOnLoss(t *testing.T) {
	e2etest.Experiment(t, leaselab.WatchdogCancelsOnLoss)
}
