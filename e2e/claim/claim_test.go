// Package claim_test runs the claim chapter's experiments (lab/claim/lab.go)
// against real PostgreSQL, real worker processes and a fake tool
// whose ledger is the ground truth.
package claim_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	claimlab "github.com/fencelab/fencelab/lab/claim"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// claim/two-claimers (naive: a read-then-write claim, caught by CLAIM-I3).
func TestTwoClaimersCannotOwnOneWorkflow(t *testing.T) {
	e2etest.Experiment(t, claimlab.TwoClaimers)
}

// claim/expired-owner (naive: a completion without the fence, caught by
// CLAIM-I4 and CLAIM-I2).
func TestExpiredOwnerCannotCommitAnOldResult(t *testing.T) {
	e2etest.Experiment(t, claimlab.ExpiredOwner)
}

// claim/unknown-to-review.
func TestUnknownWithoutQueryGoesToReview(t *testing.T) {
	e2etest.Experiment(t, claimlab.UnknownToReview)
}

// claim/retries-back-off.
func TestRetriesBackOffAndStopAtMaxAttempts(t *testing.T) {
	e2etest.Experiment(t, claimlab.RetriesBackOff)
}

// claim/recover-expired.
func TestRecoverExpiredIsBatchedAndConcurrentSafe(t *testing.T) {
	e2etest.Experiment(t, claimlab.RecoverExpired)
}

// claim/pool-drains.
func TestWorkerPoolDrainsTenThousandJobs(t *testing.T) {
	e2etest.Experiment(t, claimlab.PoolDrains)
}

// claim/lost-heartbeat.
func TestLostHeartbeatCancelsTheHandler(t *testing.T) {
	e2etest.Experiment(t, claimlab.LostHeartbeat)
}
