package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// Depth is the number of jobs of one kind in one state.
type Depth struct {
	Kind  string `json:"kind"`
	State State  `json:"state"`
	Jobs  int64  `json:"jobs"`
}

// QueueStats is the queue as an operator reads it (the console, like the
// queue-depth metrics, reads the same statements).
type QueueStats struct {
	Depth []Depth `json:"depth"`
	// OldestReady is the age of the oldest due ready job per kind: SKIP
	// LOCKED is not fair, so starvation shows here.
	OldestReady map[string]time.Duration `json:"oldest_ready"`
}

// Queue reads the queue's depth per kind and live state and the oldest
// ready age per kind. Both statements read only live rows, each state
// through its partial index: the cost does not grow with finished
// history (failed jobs are history too, and are not counted).
func (c *Client) Queue(ctx context.Context) (QueueStats, error) {
	st := QueueStats{OldestReady: map[string]time.Duration{}}
	rows, err := c.pool.Query(ctx, sqlDepth)
	if err != nil {
		return st, fmt.Errorf("claim: queue depth: %w", pg.MapError(err))
	}
	for rows.Next() {
		var d Depth
		var s string
		if err := rows.Scan(&d.Kind, &s, &d.Jobs); err != nil {
			rows.Close()
			return st, fmt.Errorf("claim: queue depth: %w", err)
		}
		d.State = State(s)
		st.Depth = append(st.Depth, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("claim: queue depth: %w", pg.MapError(err))
	}
	rows, err = c.pool.Query(ctx, sqlOldestReady)
	if err != nil {
		return st, fmt.Errorf("claim: oldest ready: %w", pg.MapError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var age float64
		if err := rows.Scan(&kind, &age); err != nil {
			return st, fmt.Errorf("claim: oldest ready: %w", err)
		}
		st.OldestReady[kind] = time.Duration(age * float64(time.Second))
	}
	return st, rows.Err()
}

// MaxListed bounds one page of ListWaiting.
const MaxListed = 200

// ListWaiting returns up to limit jobs in a state that waits for someone
// (unknown or needs_review), oldest first, after the job with id after
// (keyset paging on (due_at, id) through job_attention_idx: the cost is
// the page, not the history).
func (c *Client) ListWaiting(ctx context.Context, state State, after int64, limit int) ([]*Job, error) {
	if state != StateNeedsReview && state != StateUnknown {
		return nil, fmt.Errorf("%w: ListWaiting lists unknown or needs_review jobs, not %q", ErrInvalid, state)
	}
	limit = max(1, min(limit, MaxListed))
	rows, err := c.pool.Query(ctx, sqlListWaiting, string(state), after, limit)
	if err != nil {
		return nil, fmt.Errorf("claim: list %s: %w", state, pg.MapError(err))
	}
	return scanJobs(rows)
}

// sqlListWaiting pages through one waiting state in (due_at, id) order; the
// cursor is a job id, whose due_at the statement reads itself.
const sqlListWaiting = `
SELECT ` + jobColumns + `
  FROM job
 WHERE state = $1
   AND ($2::bigint = 0 OR (due_at, id) > (SELECT due_at, id FROM job WHERE id = $2))
 ORDER BY due_at, id
 LIMIT $3`
