package claim

// The claim chapter under every schedule (fencelab lab explore
// claim/two-claimers): two claimers of one ready workflow.

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		// job_all: once the other claimer has completed it, the job is in
		// job_history (finished jobs leave the live queue).
		if err := db.QueryRow(ctx, `SELECT state, fence FROM job_all WHERE id = $1`, id).Scan(&state, &fence); err != nil {
			x.Error(a.Name, "read the job", err)
			return
		}
		a.Say(fmt.Sprintf("read job %d", id), state, fmt.Sprintf("fence %d", fence))
		if x.Naive {
			naiveClaimRun(x, a, l, id, owner, key, state, fence)
			return
		}
		c, j := claimStep(x, a, l, owner, id, "the job is claimed or locked by the other: nothing ready")
		if j == nil {
			return
		}
		a.Step("run")
		if err := c.Execute(ctx, j); err != nil {
			x.Error(a.Name, "call the tool, complete", err)
			return
		}
		a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool, complete the job", Outcome: lab.Accepted, Fence: j.Fence})
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
	if _, err := db.Exec(ctx, naiveClaimSQL, id, owner, fence); err != nil {
		x.Error(a.Name, "claim", err)
		return
	}
	a.X.Step(lab.Step{Actor: a.Name, Action: fmt.Sprintf("write job %d running as mine, at the fence read + 1", id), Outcome: lab.Accepted, Fence: fence})
	a.Step("run")
	if _, err := l.tool.Client().Create(ctx, fakeprovider.CreateRequest{Key: workflow.IdempotencyKey(key), Reference: key}); err != nil {
		x.Error(a.Name, "call the tool", err)
		return
	}
	if _, err := db.Exec(ctx, naiveCompleteSQL, id, owner); err != nil {
		x.Error(a.Name, "complete the job", err)
		return
	}
	a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool, complete the job", Outcome: lab.Accepted, Fence: fence})
}

// expiredOwnerExplore: worker-old holds the claimed job and stalls; in
// one step ("wake") it calls the tool and commits its result. The clock,
// in one step, lapses whatever lease the job holds (set with SQL: the
// exact boundary), recovery makes the job unknown (it has side effects)
// and the resolver, asking the tool by key, sends it back to ready.
// worker-new claims it (step "claim": nothing unless the clock went
// first) and runs it (step "run"). Guarded, the old owner's completion is
// fenced: once the lease lapsed it is refused, whatever else ran, and
// the job ends with one completion under the current fence (CLAIM-I2,
// CLAIM-I4). Naive (its completion matches the job by id only), the
// schedules where it wakes after the clock record a completion under a
// stale fence; the ones where it wakes first are not caught.
var expiredOwnerExplore = &lab.Explore{
	Claim: "a stalled owner, the clock lapsing its lease and a new owner, in every order: a completion lands only under the job's current fence",
	Actors: []lab.ActorSpec{
		{Name: "old", Steps: lab.Steps("wake")},
		{Name: "clock", Steps: lab.Steps("lapse")},
		{Name: "new", Steps: lab.Steps("claim", "run")},
	},
	Run: exploreExpiredOwner,
}

func exploreExpiredOwner(x *lab.X) {
	const key = "wf-0042"
	l := newClaimLab(x, bookTool)
	oldW := l.worker(x, "worker-old")
	id := l.enqueue(x, oldW, claim.NewJob{Kind: workflow.KindName, BusinessKey: key, Payload: workflow.Input{Input: "report"}})
	stalled := claimOne(x, oldW)
	x.Step(lab.Step{Actor: "worker-old", Action: fmt.Sprintf("claim job %d, then stall before the tool call", id), Outcome: lab.Accepted, Fence: stalled.Fence})
	if x.Naive {
		x.Step(lab.Step{Actor: "db", Action: "worker-old's completion matches the job by id only", Note: "the naive completion"})
	}
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		db := a.Pool(l.url)
		switch a.Name {
		case "old":
			a.Step("wake")
			var err error
			if x.Naive {
				err = naiveComplete(x, l, stalled)
			} else {
				err = oldW.Execute(ctx, stalled)
			}
			switch {
			case errors.Is(err, claim.ErrStaleFence):
				a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool (same key), commit the result", Outcome: lab.Refused, Fence: stalled.Fence, Note: "stale fence"})
			case err != nil:
				x.Error(a.Name, "call the tool, commit the result", err)
			default:
				a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool (same key), commit the result", Outcome: lab.Accepted, Fence: stalled.Fence})
			}
		case "clock":
			a.Step("lapse")
			c := claim.NewClient(db, claim.Options{Owner: "recovery"})
			require.NoError(x, c.Register(workflow.NewKind(l.tool.Client())))
			if _, ok := a.LapseJob(db, id, func(ctx context.Context) (int, error) {
				rec, err := c.RecoverExpired(ctx, 100, time.Microsecond)
				return len(rec), err
			}); !ok {
				return
			}
			res, err := c.ResolveUnknown(ctx, 100, 2)
			if err != nil {
				x.Error(a.Name, "resolve the unknown job", err)
				return
			}
			a.Say("lapse worker-old's lease; recovery and the resolver (the tool has no effect for the key)", lab.Accepted, fmt.Sprintf("%d job(s) resolved", len(res)))
		case "new":
			c, j := claimStep(x, a, l, "worker-new", id, "the job is not ready")
			if j == nil {
				return
			}
			a.Step("run")
			err := c.Execute(ctx, j)
			switch {
			case err != nil && x.Naive:
				// The naive old owner's completion landed on the job it
				// no longer held: the current owner's is refused.
				a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool, complete the job", Outcome: lab.Refused, Fence: j.Fence, Note: err.Error()})
			case err != nil:
				x.Error(a.Name, "call the tool, complete", err)
			default:
				a.X.Step(lab.Step{Actor: a.Name, Action: "call the tool, complete the job", Outcome: lab.Accepted, Fence: j.Fence})
			}
		}
	})
	row := l.job(x, id)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read job %d: %s, owner %s", id, row.State, row.Owner), Fence: row.Fence})
	x.Figure("effects", len(l.tool.EffectsFor(workflow.IdempotencyKey(key))))
	if !x.Naive {
		require.Len(x, l.tool.EffectsFor(workflow.IdempotencyKey(key)), 1, "one tool effect for the business key")
	}
}

// claimStep is an actor's step "claim": the claim engine's claim, on a
// client over the actor's own sessions (its lock waits are visible to the
// scheduler). It returns the job claimed, or nil — said as why — when
// nothing was ready.
func claimStep(x *lab.X, a *lab.Actor, l claimLab, owner string, id int64, why string) (*claim.Client, *claim.Job) {
	c := claim.NewClient(a.Pool(l.url), claim.Options{Owner: owner})
	require.NoError(x, c.Register(workflow.NewKind(l.tool.Client())))
	a.Step("claim")
	jobs, err := c.Claim(a.Context(), claim.ClaimParams{Kinds: []string{workflow.KindName}, Limit: 1})
	if err != nil {
		x.Error(a.Name, "claim", err)
		return c, nil
	}
	if len(jobs) == 0 {
		a.Say("claim", "empty", why)
		return c, nil
	}
	a.X.Step(lab.Step{Actor: a.Name, Action: fmt.Sprintf("claim job %d", id), Outcome: lab.Accepted, Fence: jobs[0].Fence})
	return c, jobs[0]
}
