package notify_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// The notification chapter's experiments: lab/notify/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, notifylab.Experiments) }
