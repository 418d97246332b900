// Package idem_test runs the idempotency chapter's experiments
// (lab/idem/lab.go); core/idem's own tests cover the library's
// validation and bookkeeping.
package idem_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	idemlab "github.com/fencelab/fencelab/lab/idem"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestExperiments(t *testing.T) { e2etest.Experiments(t, idemlab.Experiments) }
