package order

import (
	"context"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// MaxStuckListed bounds Stuck.
const maxStuckListed = 100

// Stuck lists up to limit orders that reconciliation has not settled:
// PAYING or REFUNDING for longer than olderThan, oldest first per state
// (the same partial-index scans reconciliation reads; the console's review
// inbox shows them beside POST /flashsale/admin/reconcile).
func Stuck(ctx context.Context, db pg.Querier, olderThan time.Duration, limit int) ([]Order, error) {
	limit = max(1, min(limit, maxStuckListed))
	ws, err := waitingOrders(ctx, db, olderThan, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Order, 0, len(ws))
	for _, w := range ws {
		o, err := getOrder(ctx, db, w.id)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}
