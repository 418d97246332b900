package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/notify"
)

// Experiments are the notification chapter's runnable claims.
var Experiments = []lab.Experiment{SameEventFiftyTimes, CommitThenDrop, StalledWorkerSuperseded, PreferenceOffCancels}

// NTF-01: one event submitted fifty times at once makes one notification
// and one task per enabled channel; delivering them makes one message per
// channel, and a later resubmission changes nothing.
var SameEventFiftyTimes = lab.Experiment{
	ID:         "notify/same-event-fifty-times",
	Test:       "TestNTF01SameEventFiftyTimesConcurrentlyMakesOneNotification",
	Claim:      "one event submitted fifty times at once makes one notification, one task per enabled channel and one message per channel",
	Overlap:    true,
	Invariants: []string{"notify", "claim"},
	Naive:      "check-then-insert: look the event up, and when it is new insert a notification (no unique key)",
	Catches:    []string{"NTF-I1"},
	Control:    "the same check-then-insert by one submitter: nothing interleaves, one notification",
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		if x.Naive {
			n := 50 // the fifty of the name
			if x.Control {
				n = 1
			}
			naiveSubmissions(x, l, n)
			return
		}
		ctx := context.Background()
		l.Prefs(t, "user-0042", map[string]bool{notify.ChannelEmail: true, notify.ChannelPush: true}) // sms off
		ev := LabEvent("user-0042", "order:ord-1001:shipped")

		const n = 50
		statuses := make([]int, n)
		got := make([]notify.Notification, n)
		errs := lab.NewErrors(n)
		lab.AtOnce(n, func(i int) {
			r, err := l.Send(context.Background(), lab.Req{Method: "POST", Path: "/notify/events", Token: l.Svc, Body: ev})
			if err == nil {
				statuses[i] = r.Status
				err = json.Unmarshal(r.Body, &got[i])
			}
			errs.Add(err)
		})
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
		require.Equal(t, 1, l.Count(t, `SELECT count(*) FROM notify_notification`))
		require.Equal(t, 2, l.Count(t, `SELECT count(*) FROM notify_task`))
		require.Equal(t, 2, l.Count(t, `SELECT count(*) FROM job_all WHERE kind LIKE 'notify.%'`))
		require.Equal(t, []string{notify.ChannelEmail, notify.ChannelPush}, []string{got[0].Tasks[0].Channel, got[0].Tasks[1].Channel})

		jobs, err := l.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-1", Limit: 10,
			Kinds: []string{"notify.email", "notify.sms", "notify.push"}})
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		for _, j := range jobs {
			require.NoError(t, l.Jobs.Execute(ctx, j))
		}
		again := l.Submit(t, ev)
		require.Equal(t, got[0].ID, again.ID)
		for _, tk := range l.Get(t, again.ID).Tasks {
			require.Equal(t, notify.TaskDelivered, tk.State)
			require.Len(t, l.Channels[tk.Channel].EffectsFor(tk.DeliveryKey), 1)
		}
		require.Equal(t, 1, l.Email().Posts())
		require.Equal(t, 1, l.Push().Posts())
		require.Equal(t, 0, l.Sms().Posts(), "sms is off: no task, no message")
		require.Equal(t, 2, l.Count(t, `SELECT count(*) FROM notify_task`), "a resubmission after delivery adds nothing")
		x.Assert(l.Pool, "notify", "claim")
	},
}

// NTF-02: each channel commits the message and drops the response. What
// happens next is the channel's contract: email is resent with the same key
// and the channel replays the first message; sms is looked up, found, and
// not resent; push cannot be asked, so the task stops in needs_review with
// exactly one message sent, until an admin decides.
var CommitThenDrop = lab.Experiment{
	ID:         "notify/commit-then-drop",
	Test:       "TestNTF02CommitThenDropFollowsEachChannelsContract",
	Claim:      "a channel that commits the message and drops the answer is handled by its contract: email resent with its key, sms looked up, push to review — one message each",
	Invariants: []string{"notify", "claim"},
	Naive:      "a blind resend after an unknown outcome: the push worker treats a dropped answer as email would, and sends again (no key, no lookup: a second message)",
	Catches:    []string{"NTF-I4"},
	Control:    "the same blind-resend push worker, and the channel answers: nothing is unknown, one push",
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		if x.Naive {
			naiveBlindResend(x, l)
			return
		}
		ctx := context.Background()
		n := l.Shipped(t, "order:ord-1002:shipped")
		for _, srv := range l.Channels {
			srv.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: 1, DropResponse: true})
		}
		resolver := l.Jobs.Owner()

		// email: no answer → retried after backoff with the same key.
		email := LabTask(t, n, notify.ChannelEmail)
		l.RunAs(t, notify.ChannelEmail, "worker-1")
		require.Equal(t, notify.TaskQueued, LabTask(t, l.Get(t, n.ID), notify.ChannelEmail).State, "retry scheduled, not unknown")
		l.DueNow(t, email.JobID)
		l.RunAs(t, notify.ChannelEmail, "worker-2")
		email = LabTask(t, l.Get(t, n.ID), notify.ChannelEmail)
		require.Equal(t, notify.TaskDelivered, email.State)
		require.Equal(t, []string{"send:unknown@1", "send:success@2"}, LabCalls(email))
		for _, a := range email.Attempts {
			require.Equal(t, email.DeliveryKey, a.KeySent, "the same key on every attempt")
		}
		require.Equal(t, 2, l.Email().Requests(fakeprovider.OpCreate))
		require.Len(t, l.Email().EffectsFor(email.DeliveryKey), 1, "the channel replayed the first message")
		require.Len(t, l.Email().Effects(), 1)
		require.Equal(t, l.Email().Effects()[0].ID, email.Attempts[1].EffectID)

		// sms: no answer → unknown → the resolver asks, finds it, done.
		sms := LabTask(t, n, notify.ChannelSMS)
		l.RunAs(t, notify.ChannelSMS, "worker-1")
		require.Equal(t, notify.TaskUnknown, LabTask(t, l.Get(t, n.ID), notify.ChannelSMS).State)
		l.DueNow(t, sms.JobID)
		res, err := l.Jobs.ResolveUnknown(ctx, 10, 1)
		require.NoError(t, err)
		require.Equal(t, []claim.Resolved{{ID: sms.JobID, Kind: "notify.sms", State: claim.StateSucceeded}}, res)
		sms = LabTask(t, l.Get(t, n.ID), notify.ChannelSMS)
		require.Equal(t, notify.TaskDelivered, sms.State)
		require.Equal(t, []string{"send:unknown@1", "query:success@2"}, LabCalls(sms))
		require.Equal(t, resolver, sms.Attempts[1].Worker)
		require.Len(t, l.Sms().Effects(), 1)
		require.Equal(t, l.Sms().Effects()[0].ID, sms.Attempts[1].EffectID, "the query found the dropped send's message")
		require.Equal(t, 1, l.Sms().Requests(fakeprovider.OpCreate), "no resend")
		require.Equal(t, 1, l.Sms().Requests(fakeprovider.OpQuery))

		// push: no answer → unknown → nothing to ask → needs_review.
		push := LabTask(t, n, notify.ChannelPush)
		l.RunAs(t, notify.ChannelPush, "worker-1")
		l.DueNow(t, push.JobID)
		res, err = l.Jobs.ResolveUnknown(ctx, 10, 1)
		require.NoError(t, err)
		require.Equal(t, []claim.Resolved{{ID: push.JobID, Kind: "notify.push", State: claim.StateNeedsReview}}, res)
		push = LabTask(t, l.Get(t, n.ID), notify.ChannelPush)
		require.Equal(t, notify.TaskNeedsReview, push.State)
		require.Equal(t, []string{"send:unknown@1"}, LabCalls(push))
		require.Equal(t, 1, l.Push().Posts(), "exactly one send")
		require.Len(t, l.Push().Effects(), 1)
		require.Empty(t, l.ClaimAs(t, notify.ChannelPush, "worker-2"), "automatic handling has stopped")

		// The admin's way out: the review queue, and a decision with who and why.
		r := l.Do(t, lab.Req{Method: "GET", Path: "/notify/review", Token: l.Admin})
		require.Equal(t, 200, r.Status, string(r.Body))
		var page notify.ReviewPage
		r.JSON(t, &page)
		require.Len(t, page.Items, 1)
		require.Equal(t, push.ID, page.Items[0].Task.ID)
		require.Equal(t, "user-0042", page.Items[0].UserID)
		r = l.Do(t, lab.Req{Method: "POST", Path: fmt.Sprintf("/notify/review/%d/resolve", push.ID), Token: l.Admin,
			Body: notify.ResolveRequest{Action: notify.ActionDelivered, Reason: "push console shows push_1 delivered"}})
		require.Equal(t, 200, r.Status, string(r.Body))
		push = LabTask(t, l.Get(t, n.ID), notify.ChannelPush)
		require.Equal(t, notify.TaskDelivered, push.State)
		require.Len(t, push.Decisions, 1)
		require.Equal(t, "admin-0001", push.Decisions[0].DecidedBy)
		require.Equal(t, "push console shows push_1 delivered", push.Decisions[0].Reason)
		require.Equal(t, 1, l.Push().Posts(), "still exactly one send")
		x.Assert(l.Pool, "notify", "claim")
	},
}

// NTF-03: a worker stalls inside the call (the channel has the message, the
// worker has recorded nothing), its lease is expired with SQL, and a new
// holder takes the task: email resends with the same key, sms asks and
// finds, push goes to review. Then the stalled worker wakes: its attempt
// row gets its outcome (the call happened), its completion is refused.
var StalledWorkerSuperseded = lab.Experiment{
	ID:         "notify/stalled-worker-superseded",
	Test:       "TestNTF03StalledWorkerIsSupersededAndItsCompletionRefused",
	Claim:      "a stalled worker is superseded; its late completion is refused by the fence",
	Invariants: []string{"notify", "claim"},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		ctx := context.Background()
		n := l.Shipped(t, "order:ord-1003:shipped")
		resolver := l.Jobs.Owner()

		for _, ch := range notify.Channels {
			tk := LabTask(t, n, ch.Name)
			srv := l.Channels[ch.Name]
			gate := l.Faults.Pause(notify.PointAfterCall, tk.DeliveryKey)
			old := l.ClaimAs(t, ch.Name, "worker-old")
			require.Len(t, old, 1)
			done := make(chan error, 1)
			go func() { done <- l.Jobs.Execute(ctx, old[0]) }()
			lab.WaitOrTimeout(t, gate.Reached(), "%s: the worker never reached the call", ch.Name)
			require.Len(t, srv.EffectsFor(tk.DeliveryKey), 1, "%s: the channel has the message", ch.Name)
			require.Equal(t, []string{"send:pending@1"}, LabCalls(LabTask(t, l.Get(t, n.ID), ch.Name)))

			_, err := l.Pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 millisecond' WHERE id = $1`, tk.JobID)
			require.NoError(t, err)
			rec, err := l.Jobs.RecoverExpired(ctx, 10, time.Microsecond)
			require.NoError(t, err)
			require.Len(t, rec, 1)
			l.DueNow(t, tk.JobID)
			switch {
			case ch.Keys:
				require.Equal(t, claim.StateReady, rec[0].State, "keys: a re-run cannot make a second message")
				l.RunAs(t, ch.Name, "worker-new")
			default:
				require.Equal(t, claim.StateUnknown, rec[0].State, "without keys a lapsed lease means maybe sent")
				_, err := l.Jobs.ResolveUnknown(ctx, 10, 1)
				require.NoError(t, err)
			}

			gate.Release()
			lateErr := lab.WaitOrTimeout(t, done, "%s: the stalled worker did not finish", ch.Name)
			require.ErrorIs(t, lateErr, claim.ErrStaleFence, "%s: the superseded holder's completion is refused", ch.Name)

			tk = LabTask(t, l.Get(t, n.ID), ch.Name)
			hist := l.History(t, tk.JobID)
			require.Equal(t, "rejected_stale:1", hist[len(hist)-1])
			require.Len(t, srv.EffectsFor(tk.DeliveryKey), 1, "%s: one message", ch.Name)
			require.Equal(t, "worker-old", tk.Attempts[0].Worker)
			switch ch.Name {
			case notify.ChannelEmail:
				require.Equal(t, notify.TaskDelivered, tk.State)
				require.Equal(t, []string{"send:success@1", "send:success@3"}, LabCalls(tk), "attempts show both holders")
				require.Equal(t, "worker-new", tk.Attempts[1].Worker)
				require.Equal(t, tk.Attempts[0].EffectID, tk.Attempts[1].EffectID, "the same message, replayed by key")
				require.Equal(t, []string{"claimed:1", "recovered:2", "claimed:3", "succeeded:3", "rejected_stale:1"}, hist)
				require.Equal(t, 2, srv.Requests(fakeprovider.OpCreate))
			case notify.ChannelSMS:
				require.Equal(t, notify.TaskDelivered, tk.State)
				require.Equal(t, []string{"send:success@1", "query:success@3"}, LabCalls(tk), "attempts show both holders")
				require.Equal(t, resolver, tk.Attempts[1].Worker)
				require.Equal(t, []string{"claimed:1", "recovered:2", "resolving:3", "resolved_found:3", "rejected_stale:1"}, hist)
				require.Equal(t, 1, srv.Requests(fakeprovider.OpCreate), "found: not resent")
			case notify.ChannelPush:
				require.Equal(t, notify.TaskNeedsReview, tk.State)
				require.Equal(t, []string{"send:success@1"}, LabCalls(tk), "the old holder's call is on record")
				require.Equal(t, []string{"claimed:1", "recovered:2", "resolving:3", "needs_review:3", "rejected_stale:1"}, hist)
				require.Equal(t, 1, srv.Posts())
			}
		}
		x.Assert(l.Pool, "notify", "claim")
	},
}

// NTF-04: the user turns channels off after the tasks were enqueued and
// before a worker claims them: the claim transaction reads the preference
// and cancels those tasks; nothing is sent, and turning the channel back on
// does not bring them back.
var PreferenceOffCancels = lab.Experiment{
	ID:         "notify/preference-off-cancels",
	Test:       "TestNTF04PreferenceTurnedOffBeforeTheClaimCancelsTheTask",
	Claim:      "a channel turned off before the claim cancels its task: nothing is sent",
	Invariants: []string{"notify", "claim"},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		ctx := context.Background()
		n := l.Shipped(t, "order:ord-1004:shipped")
		require.Len(t, n.Tasks, 3)
		l.Prefs(t, "user-0042", map[string]bool{notify.ChannelEmail: true}) // sms and push off

		kinds := []string{"notify.email", "notify.sms", "notify.push"}
		jobs, err := l.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-1", Limit: 10, Kinds: kinds})
		require.NoError(t, err)
		require.Len(t, jobs, 1, "only the email task is handed to a worker")
		require.Equal(t, "notify.email", jobs[0].Kind)
		require.NoError(t, l.Jobs.Execute(ctx, jobs[0]))

		l.Prefs(t, "user-0042", AllChannels)
		none, err := l.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-2", Limit: 10, Kinds: kinds})
		require.NoError(t, err)
		require.Empty(t, none, "cancelled is final")

		got := l.Get(t, n.ID)
		require.Equal(t, notify.TaskDelivered, LabTask(t, got, notify.ChannelEmail).State)
		for _, name := range []string{notify.ChannelSMS, notify.ChannelPush} {
			tk := LabTask(t, got, name)
			require.Equal(t, notify.TaskCancelled, tk.State, name)
			require.Contains(t, tk.LastError, "turned "+name+" off")
			require.Empty(t, tk.Attempts, name)
			require.Equal(t, []string{"claimed:1", "cancelled:1"}, l.History(t, tk.JobID), name)
			require.Equal(t, 0, l.Channels[name].Requests(fakeprovider.OpCreate), "%s: zero sends", name)
			require.Empty(t, l.Channels[name].Effects(), name)
		}
		require.Len(t, l.Email().Effects(), 1)
		x.Assert(l.Pool, "notify", "claim")
	},
}

// naiveSubmissions is check-then-insert without the unique key, done by the
// experiment to the scratch database (the product inserts under the
// constraint notify_notification_one_per_event, NTF-I1): every submission
// looks the event up, finds nothing, and inserts its own notification —
// each of which would send its own message.
func naiveSubmissions(x *lab.X, l Lab, n int) {
	ctx := context.Background()
	l.Prefs(x, "user-0042", AllChannels) // the user exists
	_, err := l.Pool.Exec(ctx, `ALTER TABLE notify_notification DROP CONSTRAINT notify_notification_one_per_event`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: no unique (user_id, event_key)"})
	var wg, looked sync.WaitGroup
	looked.Add(n)
	for i := range n {
		wg.Go(func() {
			actor := fmt.Sprintf("submitter-%02d", i+1)
			var seen bool
			err := l.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notify_notification
			                                 WHERE user_id = 'user-0042' AND event_key = 'order:ord-1001:shipped')`).Scan(&seen)
			looked.Done()
			looked.Wait() // every submission has looked before any inserts
			var id int64
			if err == nil && !seen {
				err = l.Pool.QueryRow(ctx, `INSERT INTO notify_notification (user_id, event_key, template, submitted_by)
				                            VALUES ('user-0042', 'order:ord-1001:shipped', 'order_shipped', 'svc-orders') RETURNING id`).Scan(&id)
			}
			const action = "submit order:ord-1001:shipped"
			switch {
			case err != nil:
				x.Error(actor, action, err)
			case seen:
				x.Step(lab.Step{Actor: actor, Action: action, Outcome: "found", Note: "the event was already there"})
			default:
				x.Step(lab.Step{Actor: actor, Action: action, Outcome: lab.Accepted, Note: fmt.Sprintf("inserted notification %d", id)})
			}
		})
	}
	wg.Wait()
}
