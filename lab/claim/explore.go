package claim

// The claim chapter under every schedule (fencelab lab explore
// claim/two-claimers): two claimers of one ready workflow.

import (
	"context"
	"fmt"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/workflow"
)

// twoClaimersExplore: claimers A and B each look the job up (step
// "read"), claim it (step "claim") and, if they own it, call the tool and
// complete it (step "run"). Guarded, claiming is the claim engine's one
// statement (FOR UPDATE SKIP LOCKED, the state re-checked): whatever each
// read, one claimer owns the job and the other finds nothing, so every
// schedule has one claim, one completion and one tool effect (CLAIM-I3,
// CLAIM-I4). Naive (read, then write the job running with the fence read
// + 1, on a schema without the one-claim-per-fence index), the schedules
// where both read before either claims record two claims of one fence;
// the serial ones are not caught.
var twoClaimersExplore = &lab.Explore{
	Claim: "two claimers of one ready workflow, each read → claim → run: under every schedule one claim, one owner, one completion",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("read", "claim", "run")},
		{Name: "B", Steps: lab.Steps("read", "claim", "run")},
	},
	Run: exploreTwoClaimers,
}

func exploreTwoClaimers(x *lab.X) {
	const key = "wf-0000"
	l := newClaimLab(x, bookTool)
	id := l.enqueue(x, l.worker(x, "enqueuer"), claim.NewJob{Kind: workflow.KindName, BusinessKey: key})
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("enqueue workflow %s: job %d ready", key, id)})
	if x.Naive {
		_, err := l.pool.Exec(context.Background(), `DROP INDEX job_event_one_claim_per_fence`)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: "db", Action: "the naive schema: the unique index on claimed events (job, fence) dropped"})
	}
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		db := a.Pool(l.url)
		owner := map[string]string{"A": "claimer-a", "B": "claimer-b"}[a.Name]
		a.Step("read")
		var fence int64
		var state string
		if err := db.QueryRow(ctx, `SELECT state, fence FROM job WHERE id = $1`, id).Scan(&state, &fence); err != nil {
			x.Error(a.Name, "read the job", err)
			return
		}
		a.Say(fmt.Sprintf("read job %d", id), state, fmt.Sprintf("fence %d", fence))
		if x.Naive {
			naiveClaimRun(x, a, l, id, owner, key, state, fence)
			return
		}
		c := claim.NewClient(db, claim.Options{Owner: owner})
		require.NoError(x, c.Register(workflow.NewKind(l.tool.Client())))
		a.Step("claim")
		jobs, err := c.Claim(ctx, claim.ClaimParams{Kinds: []string{workflow.KindName}, Limit: 1})
		if err != nil {
			x.Error(a.Name, "claim", err)
			return
		}
		if len(jobs) == 0 {
			a.Say("claim", "empty", "the job is claimed or locked by the other: nothing ready")
			return
		}
		a.X.Step(lab.Step{Actor: a.Name, Action: fmt.Sprintf("claim job %d", id), Outcome: lab.Accepted, Fence: jobs[0].Fence})
		a.Step("run")
		if err := c.Execute(ctx, jobs[0]); err != nil {
			x.Error(a.Name, "call the tool, complete", err)
			return
		}
		a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool, complete the job", Outcome: lab.Accepted, Fence: jobs[0].Fence})
	})
	claims := l.count(x, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d claim(s) of job %d; the tool was called %d time(s)", claims, id, l.tool.Posts())})
	x.Figure("claims", claims)
	if !x.Naive {
		require.Equal(x, 1, claims, "one claim in every schedule")
		require.Len(x, l.tool.EffectsFor(workflow.IdempotencyKey(key)), 1, "one tool effect")
	}
}

// naiveClaimRun is the naive claimer's steps "claim" and "run": what it
// read decides, and its writes re-check nothing (the naive claim of
// claim/two-claimers, statement for statement).
func naiveClaimRun(x *lab.X, a *lab.Actor, l claimLab, id int64, owner, key, state string, fence int64) {
	ctx := a.Context()
	db := a.Pool(l.url)
	a.Step("claim")
	if state != string(claim.StateReady) {
		a.Say("claim", "empty", "its read found the job "+state)
		return
	}
	fence++
	if _, err := db.Exec(ctx, `
		WITH claimed AS (
		    UPDATE job SET state = 'running', owner = $2, fence = $3, attempts = attempts + 1,
		                   lease_until = now() + interval '1 minute', updated_at = now()
		     WHERE id = $1
		    RETURNING id, fence, owner, state)
		INSERT INTO job_event (job_id, event, fence, owner, state)
		SELECT id, 'claimed', fence, owner, state FROM claimed`, id, owner, fence); err != nil {
		x.Error(a.Name, "claim", err)
		return
	}
	a.X.Step(lab.Step{Actor: a.Name, Action: fmt.Sprintf("write job %d running as mine, at the fence read + 1", id), Outcome: lab.Accepted, Fence: fence})
	a.Step("run")
	if _, err := l.tool.Client().Create(ctx, fakeprovider.CreateRequest{Key: workflow.IdempotencyKey(key), Reference: key}); err != nil {
		x.Error(a.Name, "call the tool", err)
		return
	}
	if _, err := db.Exec(ctx, `
		WITH done AS (
		    UPDATE job SET state = 'succeeded', lease_until = NULL, updated_at = now()
		     WHERE id = $1
		    RETURNING id, fence, state)
		INSERT INTO job_event (job_id, event, fence, owner, state)
		SELECT id, 'succeeded', fence, $2, state FROM done`, id, owner); err != nil {
		x.Error(a.Name, "complete the job", err)
		return
	}
	a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool, complete the job", Outcome: lab.Accepted, Fence: fence})
}
