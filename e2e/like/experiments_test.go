package like_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	likeslab "github.com/fencelab/fencelab/lab/likes"
)

// The like counters chapter's experiments: lab/likes/lab.go.

func TestLIKE01StormWithDuplicatedDeliveryCountsEachChangeOnce(t *testing.T) {
	e2etest.Experiment(t, likeslab.StormWithDuplicatedDelivery)
}

func TestLIKE02CounterProcessKilledMidBatch(t *testing.T) {
	e2etest.Experiment(t, likeslab.CounterProcessKilled)
}

func TestLIKE03DatabaseStoppedImmediatelyMidStorm(t *testing.T) {
	e2etest.Experiment(t, likeslab.DatabaseStoppedImmediately)
}

// LIKE-04's naive subtest is the recompute without its watermark, caught by LIKE-I3.
func TestLIKE04RecomputeBesideOnlineIncrements(t *testing.T) {
	e2etest.Experiment(t, likeslab.RecomputeBesideIncrements)
}

// The lab's likes experiment: the whole stream delivered again is counted
// once (and the naive counter without its inbox counts it twice).
func TestLIKELabRedeliveryCountedOnce(t *testing.T) {
	e2etest.Experiment(t, likeslab.RedeliveryCountedOnce)
}
