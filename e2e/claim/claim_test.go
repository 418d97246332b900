// Package claim_test runs the claim chapter's experiments (lab/claim/lab.go)
// against real PostgreSQL, real worker processes and a fake tool
// whose ledger is the ground truth.
package claim_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	claimlab "github.com/fencelab/fencelab/lab/claim"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestExperiments(t *testing.T) { e2etest.Experiments(t, claimlab.Experiments) }
