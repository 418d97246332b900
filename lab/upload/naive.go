package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/upload"
)

// naiveTakeover is UP-03's naive version. Runner A is a processing run
// written without its fence guard: it runs the product's publish
// statement (upload.SQLPublish) in a transaction of its own and only then
// asks the claim engine to complete its job, fenced. Runner B is the
// product's run. A claims and pauses; its lease lapses (forced with SQL),
// recovery re-queues the job and B claims it with a higher fence and
// pauses before publishing (a fault point). A wakes first: its publish
// commits, its completion is refused (stale fence). B wakes: the file is
// no longer processing, so its publish — the one the current fence
// owns — is refused. UP-F3 reports the file published by a superseded
// run and not by the run the job belongs to.
//
// The control is the same naive run A alone: no lapse, no takeover; its
// publish and its completion both succeed and UP-F3 holds.
func naiveTakeover(x *lab.X) {
	t := x
	l := StartLab(x, lab.Options{})
	ctx := context.Background()
	data, f := l.CommittedReport(t)

	a := l.ClaimProcess(t, "runner-a", f.JobID)
	x.Step(lab.Step{Actor: "runner-a", Action: "claim processing of " + f.ID, Outcome: lab.Accepted, Fence: a.Fence})
	sum := upload.Summary{ContentType: http.DetectContentType(data[:512]), Bytes: int64(len(data)), Human: upload.FormatSize(int64(len(data)))}
	x.Step(lab.Step{Actor: "runner-a", Action: "processed " + f.ID, Fence: a.Fence, Note: sum.ContentType})

	var b *claim.Job
	var releaseB func()
	errB := make(chan error, 1)
	if !x.Control {
		b = l.TakeOver(x, f, a)
		gateB := l.Faults.Pause(faults.BeforeCommit, strconv.Itoa(int(f.JobID)))
		x.Cleanup(gateB.Release)
		go func() { errB <- l.Jobs.Execute(ctx, b) }()
		<-gateB.Reached()
		x.Step(lab.Step{Actor: "runner-b", Action: "processed; paused before publishing", Fence: b.Fence})
		releaseB = gateB.Release
	}

	// Runner A wakes: the product's publish, committed on its own.
	published := naivePublish(x, l, f.ID, sum, a)
	require.True(t, published, "runner A's publish found the file processing")
	x.Step(lab.Step{Actor: "runner-a", Action: "publish " + f.ID + " (no fence in its transaction)", Outcome: "committed", Fence: a.Fence})
	// Then its completion, fenced: observed, whatever it answers.
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error { return l.Jobs.CompleteTx(ctx, tx, a, sum) })
	switch {
	case err == nil:
		x.Step(lab.Step{Actor: "runner-a", Action: "complete the job", Outcome: lab.Accepted, Fence: a.Fence})
	case errors.Is(err, claim.ErrStaleFence):
		// Two facts about one runner, kept apart: what was refused is the
		// completion; the publish before it had committed and stays.
		x.Step(lab.Step{Actor: "runner-a", Action: "complete the job, after its own publish committed", Outcome: lab.Refused, Fence: a.Fence,
			Note: "stale fence: only the completion is refused — the publish it followed stays, and runner-b's run finds the file published"})
	default:
		x.Error("runner-a", "complete the job", err)
	}

	if b != nil {
		releaseB()
		require.NoError(t, <-errB, "the claim engine records runner B's run")
		// What became of B's run, as the claim engine recorded it.
		var event, detail string
		require.NoError(t, l.Pool.QueryRow(ctx, `SELECT event, coalesce(detail, '') FROM job_event
			WHERE job_id = $1 AND owner = 'runner-b' AND event <> 'claimed' ORDER BY id DESC LIMIT 1`, f.JobID).Scan(&event, &detail))
		x.Step(lab.Step{Actor: "runner-b", Action: "publish " + f.ID, Outcome: event, Fence: b.Fence, Note: detail})
	}

	var by string
	var fence int64
	var jobState string
	require.NoError(t, l.Pool.QueryRow(ctx, `SELECT f.published_by, f.published_fence, j.state FROM file_object f JOIN job_all j ON j.id = f.job_id WHERE f.id = $1`, f.ID).
		Scan(&by, &fence, &jobState))
	x.Step(lab.Step{Actor: "db", Action: "re-read " + f.ID, Fence: fence, Note: fmt.Sprintf("published by %s; job %s", by, jobState)})
	x.Figure("published_by", by)
	x.Figure("job_state", jobState)
}

// naivePublish runs the product's publish statement in a transaction of
// its own — the product runs it in the transaction of its fenced
// completion (UP-F3) — and reports whether it found the file processing.
func naivePublish(x *lab.X, l *Lab, id string, sum upload.Summary, j *claim.Job) bool {
	b, err := json.Marshal(sum)
	require.NoError(x, err)
	tag, err := l.Pool.Exec(context.Background(), upload.SQLPublish, id, sum.ContentType, b, j.Fence, j.Owner)
	if err != nil {
		x.Error(j.Owner, "publish "+id, err)
		return false
	}
	return tag.RowsAffected() == 1
}
