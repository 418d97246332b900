package pointsbench_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	pointsbench "github.com/fencelab/fencelab/bench/points"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

// `fencelab bench points --rate` drives the spread phase as an open loop
// and still ends by checking the invariants (Run fails on a violation).
// Every 201 it counts is a debit the ledger holds: the rows are read back.
func TestTheBenchAtAFixedRateCountsWhatTheLedgerHolds(t *testing.T) {
	url := pgtest.URL(t)
	out := e2etest.CaptureStdout(t, func() error {
		return pointsbench.Run(program.Modules(nil), []string{"--database-url", url, "--clients", "4", "--accounts", "10",
			"--duration", "1s", "--warmup", "0", "--hot-duration", "0", "--rate", "50"})
	})
	require.Contains(t, out, "open loop, Poisson arrivals")
	m := regexp.MustCompile(`(?m)^RESULT points .*offered_per_sec=50 missed=(\d+) debits_per_sec=\d+ .* invariants=ok$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	created := regexp.MustCompile(`201×(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, created, "no debit was created: %s", out)
	n, err := strconv.Atoi(created[1])
	require.NoError(t, err)

	db := pgtest.Pool(t, url, 2)
	var debits int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT count(*) FROM points_ledger_txn WHERE kind = 'debit' AND reason = 'bench'`).Scan(&debits))
	require.Equal(t, n, debits, "each 201 is one ledger transaction")
}
