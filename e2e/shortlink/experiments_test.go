package shortlink_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	shortlinklab "github.com/fencelab/fencelab/lab/shortlink"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// The short-links chapter's experiments: lab/shortlink/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, shortlinklab.Experiments) }
