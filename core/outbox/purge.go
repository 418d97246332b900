package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// DefaultRetention is how long processed events are kept (for replays,
// audits and late consumers) before the purge may delete them.
const DefaultRetention = 7 * 24 * time.Hour

// PurgeBatch bounds one purge statement.
const PurgeBatch = 1000

// Purge deletes events older than retention that every consumer of their
// topic has passed — and those of topics nobody consumes — with the
// consumers' inbox rows, then the demo consumer's effects older than
// retention, in batches; it returns how many events it deleted. A
// consumer that is registered but not running holds its topics' events
// until it catches up (its lag is visible), and a position rewound past a
// purged event cannot bring it back.
func Purge(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	var total int64
	for _, q := range []string{sqlPurge, sqlPurgeDemo} {
		for {
			tag, err := db.Exec(ctx, q, retention.Microseconds(), PurgeBatch)
			if err != nil {
				return total, fmt.Errorf("outbox: purge: %w", pg.MapError(err))
			}
			if q == sqlPurge {
				total += tag.RowsAffected()
			}
			if tag.RowsAffected() < PurgeBatch {
				break
			}
		}
	}
	return total, nil
}

// GrowthProbes are the outbox's periodic, per-scrape and per-batch
// queries for the plan tests and `fencelab bench growth`. topics and the
// position are a consumer's (the batch read and idle peek run every poll).
func GrowthProbes(retention time.Duration, topics []string, pos Position) []pg.Probe {
	return []pg.Probe{
		{Name: "outbox.purge batch", When: pg.Periodic, SQL: sqlPurge,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch)},
		{Name: "outbox.purge demo batch", When: pg.Periodic, SQL: sqlPurgeDemo,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch)},
		{Name: "outbox consumer status (lag)", When: pg.PerScrape, SQL: sqlStatus, Bound: pg.Live},
		{Name: "outbox consumer read batch", When: pg.Periodic, SQL: sqlRead,
			Args: []any{topics, pos.TxID, pos.ID, 100}, Bound: pg.Batch(100)},
		{Name: "outbox consumer idle peek", When: pg.Periodic, SQL: sqlPeek,
			Args: []any{topics, pos.TxID, pos.ID}, Bound: pg.Batch(1)},
		{Name: "outbox last event", When: pg.PerRequest, SQL: sqlLastEvent,
			Args: []any{topics}, Bound: pg.Batch(1)},
	}
}
