package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/notify"
)

// The naive push worker of notify/commit-then-drop: the product's delivery
// loop — the claim engine, one attempt row per call, the call itself — with
// NTF-I4 taken out. After a call that got no answer it does what the email
// channel may do and the push channel may not: it sends again. Push has no
// idempotency key and no lookup, so the second send is a second message on
// the user's phone. Everything it writes goes through the engine and the
// attempt table the product uses; nothing is inserted to look wrong.

// sqlNaiveBeginAttempt is the product's begin-attempt statement without its
// guard: it records the call under the claim the worker holds (NTF-I2,
// NTF-I3 still hold) but never asks whether an earlier send may have
// delivered (the NTF-I4 question the product asks before every push).
const sqlNaiveBeginAttempt = `
WITH task AS (
    SELECT t.id, t.delivery_key FROM notify_task t
     WHERE t.job_id = $1
       AND EXISTS (SELECT 1 FROM job WHERE job.id = $1 AND job.fence = $2 AND job.owner = $3
                                      AND job.state = 'running' AND job.lease_until > now())
)
INSERT INTO notify_attempt (task_id, attempt_no, op, fence, worker, key_sent)
SELECT task.id, coalesce((SELECT max(attempt_no) FROM notify_attempt WHERE task_id = task.id), 0) + 1,
       'send', $2, $3, task.delivery_key
  FROM task
RETURNING id, attempt_no, key_sent, started_at`

const sqlNaiveFinishAttempt = `
UPDATE notify_attempt
   SET outcome = $2, effect_id = nullif($3, ''), detail = nullif($4, ''),
       finished_at = greatest(clock_timestamp(), started_at)
 WHERE id = $1 AND outcome = 'pending'
RETURNING finished_at`

// naiveBlindResend runs the naive push delivery of one event. In the naive
// run the push channel commits the first message and drops its answer; in
// the control it answers, so the same worker sends once.
func naiveBlindResend(x *lab.X, l Lab) {
	ctx := context.Background()
	l.Prefs(x, "user-0042", map[string]bool{notify.ChannelPush: true}) // push only
	n := l.Submit(x, LabEvent("user-0042", "order:ord-1002:shipped"))
	push := LabTask(x, n, notify.ChannelPush)
	if !x.Control {
		l.Push().Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: 1, DropResponse: true})
		x.Say("push", "will commit the next message and drop its answer")
	}

	// The naive worker's own engine on the same database: the push kind
	// registered as if it were email (SideEffects false, an unanswered call
	// is an ordinary retry).
	worker := claim.NewClient(l.Pool, claim.Options{Owner: "naive-worker"})
	sender := l.Push().Client()
	require.NoError(x, worker.Register(claim.Kind{
		Name:   "notify.push",
		Handle: func(ctx context.Context, j *claim.Job) error { return naiveSend(x, l, sender, j) },
	}))

	for round := 1; round <= 3; round++ {
		jobs, err := worker.Claim(ctx, claim.ClaimParams{Owner: "naive-worker", Kinds: []string{"notify.push"}})
		require.NoError(x, err)
		if len(jobs) == 0 {
			break
		}
		x.Step(lab.Step{Actor: "naive-worker", Action: fmt.Sprintf("claim push task %d", push.ID), Outcome: lab.Accepted, Fence: jobs[0].Fence})
		err = worker.Execute(ctx, jobs[0])
		require.NoError(x, err)
		var state string
		require.NoError(x, l.Pool.QueryRow(ctx, `SELECT state FROM job_all WHERE id = $1`, push.JobID).Scan(&state))
		if state == string(claim.StateSucceeded) {
			break
		}
		// The retry's backoff, ended with SQL: the exact boundary, no wait.
		l.DueNow(x, push.JobID)
	}
	sends := len(l.Push().EffectsFor(push.DeliveryKey))
	x.Step(lab.Step{Actor: "push", Action: "messages on the user's phone", Outcome: fmt.Sprint(sends),
		Note: fmt.Sprintf("%d create requests reached the channel", l.Push().Requests(fakeprovider.OpCreate))})
	x.Figure("push_messages", sends)
	if x.Control {
		require.Equal(x, 1, sends, "the answer was not lost: one push")
	} else {
		require.Equal(x, 2, sends, "the unanswered push was sent again: two messages")
	}
}

// naiveSend is sendVia for push minus NTF-I4: record the call, make it,
// record its outcome, and treat "no answer" as "try again".
func naiveSend(x *lab.X, l Lab, sender *fakeprovider.Client, j *claim.Job) error {
	ctx := context.Background()
	var (
		id  int64
		no  int
		key string
	)
	var started, finished time.Time
	if err := l.Pool.QueryRow(ctx, sqlNaiveBeginAttempt, j.ID, j.Fence, j.Owner).Scan(&id, &no, &key, &started); err != nil {
		x.Error("naive-worker", "record push attempt", err)
		return claim.Permanent(err)
	}
	eff, callErr := sender.Create(ctx, fakeprovider.CreateRequest{Reference: key, Data: map[string]string{"template": "order_shipped"}})
	outcome, effectID, detail := notify.OutcomeSuccess, eff.ID, ""
	if callErr != nil {
		outcome, effectID, detail = notify.OutcomeUnknown, "", callErr.Error()
	}
	if err := l.Pool.QueryRow(ctx, sqlNaiveFinishAttempt, id, outcome, effectID, detail).Scan(&finished); err != nil {
		x.Error("naive-worker", "record push outcome", err)
		return claim.Permanent(err)
	}
	s := lab.Step{Actor: "naive-worker", Action: fmt.Sprintf("send push (attempt %d)", no), Fence: j.Fence,
		DBTime: started, DBEnd: finished}
	if callErr != nil {
		s.Outcome, s.Note = "no answer", "the push may have been delivered; the naive worker resends anyway"
		x.Step(s)
		return errors.New("no answer from push: sending again") // an ordinary retry: the missing NTF-I4
	}
	s.Outcome = "sent"
	x.Step(s)
	return nil
}
