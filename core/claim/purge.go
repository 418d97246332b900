package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// DefaultRetention is how long finished jobs (succeeded, failed,
// cancelled) and their history are kept for inspection before claim.purge
// deletes them (FENCELAB_CLAIM_RETENTION).
const DefaultRetention = 72 * time.Hour

// PurgeBatch bounds one purge statement: its row locks, its transaction
// and the rows it examines.
const PurgeBatch = 1000

// PurgeKindName is the periodic kind that enforces the retention.
const PurgeKindName = "claim.purge"

// PurgeFinished deletes up to batch jobs that finished more than olderThan
// ago by the database clock, with their job_event rows in the same
// statement, skipping kinds registered with KeepFinished. It returns how
// many jobs it deleted.
func (c *Client) PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, sqlPurgeFinished, olderThan.Microseconds(), batch, c.kept()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("claim: purge finished jobs: %w", pg.MapError(err))
	}
	return n, nil
}

// RetentionKind is a retention purge (docs/DATA.md) as a periodic kind:
// one run per slot across all processes, every retention/24 and at least
// every 10 minutes, so a purge's backlog stays a small share of what the
// retention keeps. What purge returns is recorded as the job's result.
// Every module's retention is one of these.
func RetentionKind(name string, retention time.Duration, purge func(context.Context) (any, error)) Kind {
	return Kind{Name: name, Every: min(retention/24, 10*time.Minute),
		Handle: func(ctx context.Context, j *Job) error {
			res, err := purge(ctx)
			if err != nil {
				return err
			}
			return j.SetResult(res)
		}}
}

// Deleted is the result most purges record: how many rows went.
func Deleted[N int | int64](n N) map[string]int64 { return map[string]int64{"deleted": int64(n)} }

// PurgeKind is claim.purge: finished jobs older than retention, in batches
// of PurgeBatch until a batch comes back short.
func (c *Client) PurgeKind(retention time.Duration) Kind {
	return RetentionKind(PurgeKindName, retention, func(ctx context.Context) (any, error) {
		var total int
		for {
			n, err := c.PurgeFinished(ctx, retention, PurgeBatch)
			total += n
			if err != nil || n < PurgeBatch {
				return Deleted(total), err
			}
		}
	})
}

// GrowthProbes are the claim engine's periodic and per-scrape queries, for
// the plan tests and `fencelab bench growth`: each must examine rows in
// proportion to its batch or the live queue, never to the history.
func GrowthProbes(retention time.Duration, kept []string) []pg.Probe {
	if kept == nil {
		kept = []string{}
	}
	return []pg.Probe{
		{Name: "claim.purge batch", When: pg.Periodic, SQL: sqlPurgeFinished,
			Args: []any{retention.Microseconds(), PurgeBatch, kept}, Bound: pg.Batch(PurgeBatch)},
		{Name: "claim queue depth (scrape, console)", When: pg.PerScrape, SQL: sqlDepth, Bound: pg.Live},
		{Name: "claim oldest ready", When: pg.PerScrape, SQL: sqlOldestReady, Bound: pg.Live},
		{Name: "console jobs in review (page)", When: pg.PerRequest, SQL: sqlListWaiting,
			Args: []any{string(StateNeedsReview), int64(0), MaxListed}, Bound: pg.Batch(MaxListed)},
		{Name: "claim take unknown", When: pg.Periodic, SQL: sqlTakeUnknown,
			Args: []any{100, "probe", int64(30_000_000)}, Bound: pg.Live},
		{Name: "claim recover expired", When: pg.Periodic, SQL: sqlRecoverExpired,
			Args: []any{100, []string{}, int64(0), "probe"}, Bound: pg.Live},
	}
}
