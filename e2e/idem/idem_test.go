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

// idem/concurrent-same-key (naive: a check-then-insert of the key, caught
// by IDEM-I1).
func TestIdempotencyConcurrentSameKeyOneEffect(t *testing.T) {
	e2etest.Experiment(t, idemlab.IdemConcurrentSameKey)
}

// idem/crashed-request-taken-over: the stalled-holder timeline on a key.
func TestIdempotencyCrashedRequestIsTakenOver(t *testing.T) {
	e2etest.Experiment(t, idemlab.IdemCrashedRequest)
}
