// Package failover_test runs chapter 14's lab experiment with the local
// PostgreSQL binaries alone: a primary, a standby made with pg_basebackup,
// an immediate stop and a promotion (no Patroni; e2e/cluster keeps that
// topology).
package failover_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/lab/failover"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestExperiments(t *testing.T) { e2etest.Experiments(t, failover.Experiments) }
