package claim_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	claimlab "github.com/fencelab/fencelab/lab/claim"
)

// claim/two-processes: two `fencelab worker` processes, one start gate,
// one workflow; the figure line
// {"claims":1,"effects":1,"os_processes":2,"state":"succeeded"}.
func TestTwoWorkerProcessesClaimExactlyOne(t *testing.T) {
	e2etest.Experiment(t, claimlab.TwoProcesses)
}
