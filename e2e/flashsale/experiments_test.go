package flashsale_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	reservations "github.com/fencelab/fencelab/lab/reservations"
)

// The reservations chapter's experiments: lab/reservations/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, reservations.Experiments) }
