package workflow

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
)

// FailoverInvariants are chapter 14's invariants.
var failoverInvariants = []invariant.Invariant{
	{
		ID: "FO-I1", Module: "workflow", Chapter: "failover",
		Statement: "every write the client was told committed is on the promoted standby (a receipt without its row is an acknowledged write the failover lost)",
		// The client's receipts are written to the new primary after the
		// failover, beside the rows that survived it. The tables exist
		// only where the failover experiment made them, so the check looks
		// for them first (a live database has none: nothing to compare).
		Check: checkAcknowledgedSurvive,
	},
}

const sqlFOI1 = `
SELECT r.seq AS write, r.acknowledged_at, 'acknowledged, absent after the failover' AS problem
  FROM failover_receipt r
 WHERE NOT EXISTS (SELECT 1 FROM failover_write w WHERE w.seq = r.seq)
 ORDER BY r.seq`

func checkAcknowledgedSurvive(ctx context.Context, db pg.Querier) ([]string, [][]any, error) {
	cols := []string{"write", "acknowledged_at", "problem"}
	var present bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('failover_receipt') IS NOT NULL AND to_regclass('failover_write') IS NOT NULL`).Scan(&present); err != nil {
		return nil, nil, err
	}
	if !present {
		return cols, nil, nil
	}
	rows, err := db.Query(ctx, sqlFOI1)
	if err != nil {
		return nil, nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	return cols, out, err
}
