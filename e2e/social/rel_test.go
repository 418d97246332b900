package social_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	relations "github.com/fencelab/fencelab/lab/relations"
)

// The relations chapter's experiments: lab/relations/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, relations.Experiments) }
