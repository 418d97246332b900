package social_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	relations "github.com/fencelab/fencelab/lab/relations"
)

// The relations chapter's experiments: lab/relations/lab.go.

func TestREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState(t *testing.T) {
	e2etest.Experiment(t, relations.DoubleFollowRaces)
}

func TestREL02ShuffledDuplicatedDeliveryGivesTheInOrderView(t *testing.T) {
	e2etest.Experiment(t, relations.ShuffledDuplicatedDelivery)
}

func TestREL03BlockRevokesReadsTheMomentItCommits(t *testing.T) {
	e2etest.Experiment(t, relations.BlockRevokesOnCommit)
}

func TestREL04ResetOffsetAndReplayDoesNotResurrect(t *testing.T) {
	e2etest.Experiment(t, relations.ResetOffsetReplay)
}

// The lab's relations experiment: a replay after a lost position and inbox
// resurrects nothing (and the naive view, applying without versions, does).
func TestRELLabReplayDoesNotResurrect(t *testing.T) {
	e2etest.Experiment(t, relations.ReplayDoesNotResurrect)
}
