package claim

import (
	"context"
	"fmt"

	"github.com/fencelab/fencelab/core/pg"
)

// sqlDeleteFinished deletes the jobs among $1 that are finished, with their
// job_event history and their keys in the same statement (goneRows), by id
// (job_history_id in each partition): the owner's purge of a KeepFinished
// kind names the jobs its rows pointed at.
const sqlDeleteFinished = `
WITH gone AS (
    DELETE FROM job_history WHERE id = ANY ($1::bigint[]) RETURNING id
), ` + goneRows + `
SELECT count(*) FROM gone`

// ErrNotFinished is DeleteFinishedTx's answer when a named job is not
// finished (or not there): the caller's transaction must roll back, so
// that its rows and the jobs they point at go together or not at all.
var ErrNotFinished = fmt.Errorf("claim: a job to delete is not finished")

// DeleteFinishedTx deletes finished jobs of a KeepFinished kind, by id, in
// the owner's transaction (tx): the owner's retention purge removes its
// rows and the jobs they point at in one commit, so neither is ever seen
// without the other. Every id must name a finished job (succeeded, failed,
// cancelled); otherwise nothing is deleted and ErrNotFinished is returned.
func DeleteFinishedTx(ctx context.Context, tx pg.Querier, ids []int64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	if err := tx.QueryRow(ctx, sqlDeleteFinished, ids).Scan(&n); err != nil {
		return 0, fmt.Errorf("claim: delete finished jobs: %w", pg.MapError(err))
	}
	if n != len(ids) {
		return n, fmt.Errorf("%w: %d of %d", ErrNotFinished, len(ids)-n, len(ids))
	}
	return n, nil
}
