package lease_test

import (
	"testing"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	leaselab "github.com/fencelab/fencelab/lab/lease"
)

// The chapter's one acceptance condition: a paused old holder, once
// resumed, cannot write the protected resource (lease/paused-holder).
func TestPausedHolderCannotWriteAfterExpiry(t *testing.T) {
	e2etest.Experiment(t, leaselab.PausedHolder)
}

// The same timeline against a resource that does not check the token (the
// naive version of lease/paused-holder): the lease behaves exactly as
// before, and still A's stale write lands on top of B's. LOCK-I2 catches
// it: the guarantee lives at the resource or nowhere.
func TestUnfencedResourceLosesTheGuarantee(t *testing.T) {
	t.Parallel()
	lab.TestNaive(t, leaselab.PausedHolder, e2etest.Env)
}
