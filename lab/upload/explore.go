package upload

// The upload chapter under every schedule (fencelab lab explore
// upload/processing-lease-taken-over): a processing run, the clock that
// lapses its lease, and the runner that takes the job over.

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/upload"
)

// takeoverExplore: runner-a (actor A) holds the file's processing job;
// step "process" does its work up to the product's before_commit point,
// step "publish" publishes and completes. The clock, in one step, lapses
// whatever lease the job holds (set with SQL: the exact boundary) and
// recovery re-queues it. runner-b (actor B) claims the job (step "claim",
// through its own work up to before_commit: it finds no job unless the
// clock re-queued it) and publishes. Guarded, publish and completion
// commit in one transaction and the completion is fenced: a superseded
// run's publish rolls back, so in every schedule the file is published at
// most once, by the run the job belongs to (UP-F3). Naive, runner-a
// publishes in a transaction of its own before its fenced completion: the
// schedules where the clock lapses its lease before it publishes leave a
// file published by a superseded run; the others are not caught.
var takeoverExplore = &lab.Explore{
	Claim: "a processing run, the clock lapsing its lease and a second runner taking the job over, in every order: the file is published at most once, by the run holding the job's current fence",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("process", "publish")},
		{Name: "clock", Steps: lab.Steps("lapse")},
		{Name: "B", Steps: lab.Steps("claim", "publish")},
	},
	Run: exploreTakeover,
}

func exploreTakeover(x *lab.X) {
	ctx := context.Background()
	l := StartLab(x, lab.Options{})
	data, f := l.CommittedReport(x)
	ja := l.ClaimProcess(x, "runner-a", f.JobID)
	x.Step(lab.Step{Actor: "runner-a", Action: "claim processing of " + f.ID, Outcome: lab.Accepted, Fence: ja.Fence})
	if x.Naive {
		x.Step(lab.Step{Actor: "db", Action: "runner-a publishes in a transaction of its own, before its fenced completion", Note: "the naive run"})
	}
	// The product's before_commit point is the boundary between a run's
	// work and its publish: nothing is published yet.
	x.StepAt(l.Faults, faults.BeforeCommit, "publish")
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		db := a.Pool(l.DBURL)
		switch a.Name {
		case "clock":
			a.Step("lapse")
			n, ok := a.LapseJob(db, f.JobID, func(ctx context.Context) (int, error) {
				rec, err := l.Jobs.RecoverExpired(ctx, 10, 0)
				return len(rec), err
			})
			if !ok {
				return
			}
			a.Say("lapse runner-a's lease; recovery re-queues the job", lab.Accepted, fmt.Sprintf("%d job(s) recovered", n))
		case "B":
			a.Step("claim")
			jobs, err := l.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{upload.KindProcess}, Owner: "runner-b", Limit: 1})
			if err != nil {
				x.Error(a.Name, "claim processing", err)
				return
			}
			if len(jobs) == 0 {
				a.Say("claim processing of "+f.ID, "none", "the job is not re-queued")
				return
			}
			a.X.Step(lab.Step{Actor: a.Name, Action: "claim processing of " + f.ID, Outcome: lab.Accepted, Fence: jobs[0].Fence})
			run(x, l, a, jobs[0], f.ID)
		case "A":
			a.Step("process")
			if !x.Naive {
				run(x, l, a, ja, f.ID)
				return
			}
			sum := upload.Summary{ContentType: http.DetectContentType(data[:512]), Bytes: int64(len(data)), Human: upload.FormatSize(int64(len(data)))}
			a.Step("publish")
			if !naivePublish(x, l, f.ID, sum, ja) {
				a.X.Step(lab.Step{Actor: a.Name, Action: "publish " + f.ID + " (no fence in its transaction)", Outcome: lab.Refused, Fence: ja.Fence, Note: "not processing"})
				return
			}
			a.X.Step(lab.Step{Actor: a.Name, Action: "publish " + f.ID + " (no fence in its transaction)", Outcome: "committed", Fence: ja.Fence})
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return l.Jobs.CompleteTx(ctx, tx, ja, sum) })
			switch {
			case err == nil:
				a.X.Step(lab.Step{Actor: a.Name, Action: "complete the job", Outcome: lab.Accepted, Fence: ja.Fence})
			case errors.Is(err, claim.ErrStaleFence):
				a.X.Step(lab.Step{Actor: a.Name, Action: "complete the job, after its own publish committed", Outcome: lab.Refused, Fence: ja.Fence, Note: "stale fence"})
			default:
				x.Error(a.Name, "complete the job", err)
			}
		}
	})
	var state, by string
	var fence int64
	require.NoError(x, l.Pool.QueryRow(ctx, `SELECT state, coalesce(published_by, ''), coalesce(published_fence, 0) FROM file_object WHERE id = $1`, f.ID).
		Scan(&state, &by, &fence))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read %s: %s", f.ID, state), Fence: fence, Note: by})
	x.Figure("published_by", by)
}

// run is the product's processing run of j: its work, the before_commit
// point (the actor's step "publish"), then publish and fenced completion
// in one transaction.
func run(x *lab.X, l *Lab, a *lab.Actor, j *claim.Job, id string) {
	err := l.Jobs.Execute(a.Context(), j)
	action := "publish " + id
	switch {
	case err == nil:
		var by string
		require.NoError(x, l.Pool.QueryRow(context.Background(), `SELECT coalesce(published_by, '') FROM file_object WHERE id = $1`, id).Scan(&by))
		if by == j.Owner {
			a.X.Step(lab.Step{Actor: a.Name, Action: action, Outcome: lab.Accepted, Fence: j.Fence})
		} else {
			a.X.Step(lab.Step{Actor: a.Name, Action: action, Outcome: lab.Refused, Fence: j.Fence, Note: "the file was published already; the claim engine recorded the run"})
		}
	case errors.Is(err, claim.ErrStaleFence):
		a.X.Step(lab.Step{Actor: a.Name, Action: action, Outcome: lab.Refused, Fence: j.Fence, Note: "stale fence: the publish rolled back with the completion"})
	default:
		x.Error(a.Name, action, err)
	}
}
