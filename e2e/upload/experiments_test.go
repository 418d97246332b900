package upload_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	uploadlab "github.com/fencelab/fencelab/lab/upload"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// The upload chapter's experiments: lab/upload/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, uploadlab.Experiments) }
