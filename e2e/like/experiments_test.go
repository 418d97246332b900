package like_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	likeslab "github.com/fencelab/fencelab/lab/likes"
)

// The like counters chapter's experiments: lab/likes/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, likeslab.Experiments) }
