package claim

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// Decision is a person's verdict on a job in needs_review: the automatic
// machinery could not establish whether the effect happened (a channel that
// can neither deduplicate nor be asked), so someone looked elsewhere.
type Decision string

const (
	// DecideSucceeded: the effect happened; the job succeeds.
	DecideSucceeded Decision = "succeeded"
	// DecideRetry: run the job again now, knowing the effect may happen
	// twice; at least one more attempt is granted.
	DecideRetry Decision = "retry"
	// DecideFailed: give up; the job fails.
	DecideFailed Decision = "failed"
)

// ErrNotInReview: the job is not (or no longer) in needs_review — someone
// else decided first, or it never needed a person.
var ErrNotInReview = errors.New("claim: job is not in needs_review")

// DecideTx settles a needs_review job inside the caller's transaction, so a
// module's record of who decided and why commits with the transition or not
// at all. who names the person (it is written as the event's owner, prefixed
// "review:"); detail is the event's detail (and last_error unless the job
// succeeds); result, for DecideSucceeded, replaces the job's result when not
// nil. It returns the job as it is after the decision.
func (c *Client) DecideTx(ctx context.Context, tx pgx.Tx, id int64, d Decision, who, detail string, result any) (*Job, error) {
	switch d {
	case DecideSucceeded, DecideRetry, DecideFailed:
	default:
		return nil, fmt.Errorf("%w: decision %q", ErrInvalid, d)
	}
	if who == "" {
		return nil, fmt.Errorf("%w: a decision needs the deciding person", ErrInvalid)
	}
	res, err := marshalResult(result)
	if err != nil {
		return nil, err
	}
	j, err := scanJob(tx.QueryRow(ctx, sqlDecide, id, string(d), truncate(detail, 2000), res, "review:"+who))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w (job %d)", ErrNotInReview, id)
	}
	if err != nil {
		return nil, fmt.Errorf("claim: decide job %d: %w", id, pg.MapError(err))
	}
	c.m.finished(j.Kind, "review_"+string(d))
	return j, nil
}
