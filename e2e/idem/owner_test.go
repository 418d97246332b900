package idem_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	idemlab "github.com/fencelab/fencelab/lab/idem"
)

// idem/owner-gone-after-serve-kill: a killed serve's key is taken over as
// soon as a restarted serve answers, not when its lock expires.
func TestIdempotencyKeyIsFreedWhenItsServeDies(t *testing.T) {
	e2etest.Experiment(t, idemlab.IdemOwnerGone)
}
