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
// topic has passed, and those consumers' inbox rows, in batches; it
// returns how many events it deleted. A consumer that is registered but
// not running holds its topics' events until it catches up (its lag is
// visible), and a position rewound past a purged event cannot bring it
// back.
func Purge(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, sqlPurge, retention.Microseconds(), PurgeBatch)
		if err != nil {
			return total, fmt.Errorf("outbox: purge: %w", pg.MapError(err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < PurgeBatch {
			return total, nil
		}
	}
}
