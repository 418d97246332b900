package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/notify"
)

// NTF-01: one event submitted fifty times at once makes one notification
// and one task per enabled channel; delivering them makes one message per
// channel, and a later resubmission changes nothing.
func TestNTF01SameEventFiftyTimesConcurrentlyMakesOneNotification(t *testing.T) {
	t.Parallel()
	l := newLab(t, nil, e2etest.Options{})
	ctx := context.Background()
	l.prefs(t, "user-0042", map[string]bool{notify.ChannelEmail: true, notify.ChannelPush: true}) // sms off
	ev := event("user-0042", "order:ord-1001:shipped")

	const n = 50
	start := make(chan struct{})
	statuses := make([]int, n)
	got := make([]notify.Notification, n)
	var wg sync.WaitGroup
	errs := e2etest.NewErrors(n)
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := l.Send(context.Background(), e2etest.Req{Method: "POST", Path: "/notify/events", Token: l.svc, Body: ev})
			if err == nil {
				statuses[i] = r.Status
				err = json.Unmarshal(r.Body, &got[i])
			}
			errs.Add(err)
		})
	}
	close(start)
	wg.Wait()
	errs.Check(t) // on the test goroutine

	created := 0
	for i := range n {
		require.Contains(t, []int{200, 201}, statuses[i])
		if statuses[i] == 201 {
			created++
		}
		require.Equal(t, got[0].ID, got[i].ID, "every submission names the same notification")
		require.Len(t, got[i].Tasks, 2)
		require.Equal(t, got[0].Tasks[0].ID, got[i].Tasks[0].ID)
	}
	require.Equal(t, 1, created, "exactly one submission created it")
	require.Equal(t, 1, l.count(t, `SELECT count(*) FROM notify_notification`))
	require.Equal(t, 2, l.count(t, `SELECT count(*) FROM notify_task`))
	require.Equal(t, 2, l.count(t, `SELECT count(*) FROM job WHERE kind LIKE 'notify.%'`))
	require.Equal(t, []string{notify.ChannelEmail, notify.ChannelPush}, []string{got[0].Tasks[0].Channel, got[0].Tasks[1].Channel})

	jobs, err := l.Deps.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-1", Limit: 10,
		Kinds: []string{"notify.email", "notify.sms", "notify.push"}})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	for _, j := range jobs {
		require.NoError(t, l.Deps.Jobs.Execute(ctx, j))
	}
	again := l.submit(t, ev)
	require.Equal(t, got[0].ID, again.ID)
	for _, tk := range l.get(t, again.ID).Tasks {
		require.Equal(t, notify.TaskDelivered, tk.State)
		require.Len(t, l.channels[tk.Channel].EffectsFor(tk.DeliveryKey), 1)
	}
	require.Equal(t, 1, l.email().Posts())
	require.Equal(t, 1, l.push().Posts())
	require.Equal(t, 0, l.sms().Posts(), "sms is off: no task, no message")
	require.Equal(t, 2, l.count(t, `SELECT count(*) FROM notify_task`), "a resubmission after delivery adds nothing")
	e2etest.Assert(t, l.Pool, "notify")
	e2etest.Assert(t, l.Pool, "claim")
}

// NTF-02: each channel commits the message and drops the response. What
// happens next is the channel's contract: email is resent with the same key
// and the channel replays the first message; sms is looked up, found, and
// not resent; push cannot be asked, so the task stops in needs_review with
// exactly one message sent, until an admin decides.
func TestNTF02CommitThenDropFollowsEachChannelsContract(t *testing.T) {
	t.Parallel()
	l := newLab(t, nil, e2etest.Options{})
	ctx := context.Background()
	l.prefs(t, "user-0042", all)
	n := l.submit(t, event("user-0042", "order:ord-1002:shipped"))
	for _, srv := range l.channels {
		srv.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: 1, DropResponse: true})
	}
	resolver := l.Deps.Jobs.Owner()

	// email: no answer → retried after backoff with the same key.
	email := task(t, n, notify.ChannelEmail)
	first := l.claimAs(t, notify.ChannelEmail, "worker-1")
	require.Len(t, first, 1)
	require.NoError(t, l.Deps.Jobs.Execute(ctx, first[0]))
	require.Equal(t, notify.TaskQueued, task(t, l.get(t, n.ID), notify.ChannelEmail).State, "retry scheduled, not unknown")
	l.dueNow(t, email.JobID)
	second := l.claimAs(t, notify.ChannelEmail, "worker-2")
	require.Len(t, second, 1)
	require.NoError(t, l.Deps.Jobs.Execute(ctx, second[0]))
	email = task(t, l.get(t, n.ID), notify.ChannelEmail)
	require.Equal(t, notify.TaskDelivered, email.State)
	require.Equal(t, []string{"send:unknown@1", "send:success@2"}, calls(email))
	for _, a := range email.Attempts {
		require.Equal(t, email.DeliveryKey, a.KeySent, "the same key on every attempt")
	}
	require.Equal(t, 2, l.email().Requests(fakeprovider.OpCreate))
	require.Len(t, l.email().EffectsFor(email.DeliveryKey), 1, "the channel replayed the first message")
	require.Len(t, l.email().Effects(), 1)
	require.Equal(t, l.email().Effects()[0].ID, email.Attempts[1].EffectID)

	// sms: no answer → unknown → the resolver asks, finds it, done.
	sms := task(t, n, notify.ChannelSMS)
	jobs := l.claimAs(t, notify.ChannelSMS, "worker-1")
	require.Len(t, jobs, 1)
	require.NoError(t, l.Deps.Jobs.Execute(ctx, jobs[0]))
	require.Equal(t, notify.TaskUnknown, task(t, l.get(t, n.ID), notify.ChannelSMS).State)
	l.dueNow(t, sms.JobID)
	res, err := l.Deps.Jobs.ResolveUnknown(ctx, 10, 1)
	require.NoError(t, err)
	require.Equal(t, []claim.Resolved{{ID: sms.JobID, Kind: "notify.sms", State: claim.StateSucceeded}}, res)
	sms = task(t, l.get(t, n.ID), notify.ChannelSMS)
	require.Equal(t, notify.TaskDelivered, sms.State)
	require.Equal(t, []string{"send:unknown@1", "query:success@2"}, calls(sms))
	require.Equal(t, resolver, sms.Attempts[1].Worker)
	require.Len(t, l.sms().Effects(), 1)
	require.Equal(t, l.sms().Effects()[0].ID, sms.Attempts[1].EffectID, "the query found the dropped send's message")
	require.Equal(t, 1, l.sms().Requests(fakeprovider.OpCreate), "no resend")
	require.Equal(t, 1, l.sms().Requests(fakeprovider.OpQuery))

	// push: no answer → unknown → nothing to ask → needs_review.
	push := task(t, n, notify.ChannelPush)
	jobs = l.claimAs(t, notify.ChannelPush, "worker-1")
	require.Len(t, jobs, 1)
	require.NoError(t, l.Deps.Jobs.Execute(ctx, jobs[0]))
	l.dueNow(t, push.JobID)
	res, err = l.Deps.Jobs.ResolveUnknown(ctx, 10, 1)
	require.NoError(t, err)
	require.Equal(t, []claim.Resolved{{ID: push.JobID, Kind: "notify.push", State: claim.StateNeedsReview}}, res)
	push = task(t, l.get(t, n.ID), notify.ChannelPush)
	require.Equal(t, notify.TaskNeedsReview, push.State)
	require.Equal(t, []string{"send:unknown@1"}, calls(push))
	require.Equal(t, 1, l.push().Posts(), "exactly one send")
	require.Len(t, l.push().Effects(), 1)
	require.Empty(t, l.claimAs(t, notify.ChannelPush, "worker-2"), "automatic handling has stopped")

	// The admin's way out: the review queue, and a decision with who and why.
	r := l.Do(t, e2etest.Req{Method: "GET", Path: "/notify/review", Token: l.admin})
	require.Equal(t, 200, r.Status, string(r.Body))
	var page notify.ReviewPage
	r.JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, push.ID, page.Items[0].Task.ID)
	require.Equal(t, "user-0042", page.Items[0].UserID)
	r = l.Do(t, e2etest.Req{Method: "POST", Path: fmt.Sprintf("/notify/review/%d/resolve", push.ID), Token: l.admin,
		Body: notify.ResolveRequest{Action: notify.ActionDelivered, Reason: "push console shows push_1 delivered"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	push = task(t, l.get(t, n.ID), notify.ChannelPush)
	require.Equal(t, notify.TaskDelivered, push.State)
	require.Len(t, push.Decisions, 1)
	require.Equal(t, "admin-0001", push.Decisions[0].DecidedBy)
	require.Equal(t, "push console shows push_1 delivered", push.Decisions[0].Reason)
	require.Equal(t, 1, l.push().Posts(), "still exactly one send")
	e2etest.Assert(t, l.Pool, "notify")
	e2etest.Assert(t, l.Pool, "claim")
}

// NTF-03: a worker stalls inside the call (the channel has the message, the
// worker has recorded nothing), its lease is expired with SQL, and a new
// holder takes the task: email resends with the same key, sms asks and
// finds, push goes to review. Then the stalled worker wakes: its attempt
// row gets its outcome (the call happened), its completion is refused.
func TestNTF03StalledWorkerIsSupersededAndItsCompletionRefused(t *testing.T) {
	t.Parallel()
	l := newLab(t, nil, e2etest.Options{})
	ctx := context.Background()
	l.prefs(t, "user-0042", all)
	n := l.submit(t, event("user-0042", "order:ord-1003:shipped"))
	resolver := l.Deps.Jobs.Owner()

	for _, ch := range notify.Channels {
		tk := task(t, n, ch.Name)
		srv := l.channels[ch.Name]
		gate := l.Faults.Pause(notify.PointAfterCall, tk.DeliveryKey)
		old := l.claimAs(t, ch.Name, "worker-old")
		require.Len(t, old, 1)
		done := make(chan error, 1)
		go func() { done <- l.Deps.Jobs.Execute(ctx, old[0]) }()
		e2etest.WaitOrTimeout(t, gate.Reached(), "%s: the worker never reached the call", ch.Name)
		require.Len(t, srv.EffectsFor(tk.DeliveryKey), 1, "%s: the channel has the message", ch.Name)
		require.Equal(t, []string{"send:pending@1"}, calls(task(t, l.get(t, n.ID), ch.Name)))

		_, err := l.Pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 millisecond' WHERE id = $1`, tk.JobID)
		require.NoError(t, err)
		rec, err := l.Deps.Jobs.RecoverExpired(ctx, 10, time.Microsecond)
		require.NoError(t, err)
		require.Len(t, rec, 1)
		l.dueNow(t, tk.JobID)
		switch {
		case ch.Keys:
			require.Equal(t, claim.StateReady, rec[0].State, "keys: a re-run cannot make a second message")
			again := l.claimAs(t, ch.Name, "worker-new")
			require.Len(t, again, 1)
			require.NoError(t, l.Deps.Jobs.Execute(ctx, again[0]))
		default:
			require.Equal(t, claim.StateUnknown, rec[0].State, "without keys a lapsed lease means maybe sent")
			_, err := l.Deps.Jobs.ResolveUnknown(ctx, 10, 1)
			require.NoError(t, err)
		}

		gate.Release()
		lateErr := e2etest.WaitOrTimeout(t, done, "%s: the stalled worker did not finish", ch.Name)
		require.ErrorIs(t, lateErr, claim.ErrStaleFence, "%s: the superseded holder's completion is refused", ch.Name)

		tk = task(t, l.get(t, n.ID), ch.Name)
		hist := l.history(t, tk.JobID)
		require.Equal(t, "rejected_stale:1", hist[len(hist)-1])
		require.Len(t, srv.EffectsFor(tk.DeliveryKey), 1, "%s: one message", ch.Name)
		require.Equal(t, "worker-old", tk.Attempts[0].Worker)
		switch ch.Name {
		case notify.ChannelEmail:
			require.Equal(t, notify.TaskDelivered, tk.State)
			require.Equal(t, []string{"send:success@1", "send:success@3"}, calls(tk), "attempts show both holders")
			require.Equal(t, "worker-new", tk.Attempts[1].Worker)
			require.Equal(t, tk.Attempts[0].EffectID, tk.Attempts[1].EffectID, "the same message, replayed by key")
			require.Equal(t, []string{"claimed:1", "recovered:2", "claimed:3", "succeeded:3", "rejected_stale:1"}, hist)
			require.Equal(t, 2, srv.Requests(fakeprovider.OpCreate))
		case notify.ChannelSMS:
			require.Equal(t, notify.TaskDelivered, tk.State)
			require.Equal(t, []string{"send:success@1", "query:success@3"}, calls(tk), "attempts show both holders")
			require.Equal(t, resolver, tk.Attempts[1].Worker)
			require.Equal(t, []string{"claimed:1", "recovered:2", "resolving:3", "resolved_found:3", "rejected_stale:1"}, hist)
			require.Equal(t, 1, srv.Requests(fakeprovider.OpCreate), "found: not resent")
		case notify.ChannelPush:
			require.Equal(t, notify.TaskNeedsReview, tk.State)
			require.Equal(t, []string{"send:success@1"}, calls(tk), "the old holder's call is on record")
			require.Equal(t, []string{"claimed:1", "recovered:2", "resolving:3", "needs_review:3", "rejected_stale:1"}, hist)
			require.Equal(t, 1, srv.Posts())
		}
	}
	e2etest.Assert(t, l.Pool, "notify")
	e2etest.Assert(t, l.Pool, "claim")
}

// NTF-04: the user turns channels off after the tasks were enqueued and
// before a worker claims them: the claim transaction reads the preference
// and cancels those tasks; nothing is sent, and turning the channel back on
// does not bring them back.
func TestNTF04PreferenceTurnedOffBeforeTheClaimCancelsTheTask(t *testing.T) {
	t.Parallel()
	l := newLab(t, nil, e2etest.Options{})
	ctx := context.Background()
	l.prefs(t, "user-0042", all)
	n := l.submit(t, event("user-0042", "order:ord-1004:shipped"))
	require.Len(t, n.Tasks, 3)
	l.prefs(t, "user-0042", map[string]bool{notify.ChannelEmail: true}) // sms and push off

	kinds := []string{"notify.email", "notify.sms", "notify.push"}
	jobs, err := l.Deps.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-1", Limit: 10, Kinds: kinds})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "only the email task is handed to a worker")
	require.Equal(t, "notify.email", jobs[0].Kind)
	require.NoError(t, l.Deps.Jobs.Execute(ctx, jobs[0]))

	l.prefs(t, "user-0042", all)
	none, err := l.Deps.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-2", Limit: 10, Kinds: kinds})
	require.NoError(t, err)
	require.Empty(t, none, "cancelled is final")

	got := l.get(t, n.ID)
	require.Equal(t, notify.TaskDelivered, task(t, got, notify.ChannelEmail).State)
	for _, name := range []string{notify.ChannelSMS, notify.ChannelPush} {
		tk := task(t, got, name)
		require.Equal(t, notify.TaskCancelled, tk.State, name)
		require.Contains(t, tk.LastError, "turned "+name+" off")
		require.Empty(t, tk.Attempts, name)
		require.Equal(t, []string{"claimed:1", "cancelled:1"}, l.history(t, tk.JobID), name)
		require.Equal(t, 0, l.channels[name].Requests(fakeprovider.OpCreate), "%s: zero sends", name)
		require.Empty(t, l.channels[name].Effects(), name)
	}
	require.Len(t, l.email().Effects(), 1)
	e2etest.Assert(t, l.Pool, "notify")
	e2etest.Assert(t, l.Pool, "claim")
}
