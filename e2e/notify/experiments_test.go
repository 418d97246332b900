package notify_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestNTF01SameEventFiftyTimesConcurrentlyMakesOneNotification(t *testing.T) {
	e2etest.Experiment(t, notifylab.SameEventFiftyTimes)
}

func TestNTF02CommitThenDropFollowsEachChannelsContract(t *testing.T) {
	e2etest.Experiment(t, notifylab.CommitThenDrop)
}

func TestNTF03StalledWorkerIsSupersededAndItsCompletionRefused(t *testing.T) {
	e2etest.Experiment(t, notifylab.StalledWorkerSuperseded)
}

func TestNTF04PreferenceTurnedOffBeforeTheClaimCancelsTheTask(t *testing.T) {
	e2etest.Experiment(t, notifylab.PreferenceOffCancels)
}
