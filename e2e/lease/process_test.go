package lease_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	leaselab "github.com/fencelab/fencelab/lab/lease"
)

// The chapter's timeline with real OS processes (lease/two-processes).
func TestReportJobAcrossTwoProcesses(t *testing.T) {
	e2etest.Experiment(t, leaselab.TwoProcesses)
}
