package claim_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/workflow"
)

// claim/two-processes: two `fencelab worker` processes, one start gate,
// one workflow; the figure line
// {"claims":1,"effects":1,"os_processes":2,"state":"succeeded"}.
func TestTwoWorkerProcessesClaimExactlyOne(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, workflow.TwoProcesses)
}
