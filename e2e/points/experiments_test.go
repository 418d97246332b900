package points_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	pointslab "github.com/fencelab/fencelab/lab/points"
)

// The points chapter's experiments: lab/points/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, pointslab.Experiments) }
