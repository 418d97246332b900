package lease_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	leaselab "github.com/fencelab/fencelab/lab/lease"
)

// The lease chapter's experiments: lab/lease/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, leaselab.Experiments) }
