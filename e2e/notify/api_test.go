package notify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
	"github.com/fencelab/fencelab/services/notify"
)

// A client's mistake is a 4xx problem and leaves nothing behind: no user,
// notification, task or job.
func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{})
	user42 := l.Token(t, "user-0042", httpx.RoleUser)
	big := `{"blob":"` + strings.Repeat("x", notify.MaxDataBytes) + `"}`

	for name, tc := range map[string]struct {
		token, body string
		status      int
		code        string
	}{
		"unknown user":      {l.Svc, `{"user_id":"user-9999","event_key":"order:ord-1:shipped","template":"order_shipped"}`, 404, "unknown_user"},
		"missing event key": {l.Svc, `{"user_id":"user-0042","template":"order_shipped"}`, 422, "invalid_event_key"},
		"empty event key":   {l.Svc, `{"user_id":"user-0042","event_key":"","template":"order_shipped"}`, 422, "invalid_event_key"},
		"spaced event key":  {l.Svc, `{"user_id":"user-0042","event_key":"order 1","template":"order_shipped"}`, 422, "invalid_event_key"},
		"missing user":      {l.Svc, `{"event_key":"order:ord-1:shipped","template":"order_shipped"}`, 422, "invalid_user_id"},
		"missing template":  {l.Svc, `{"user_id":"user-0042","event_key":"order:ord-1:shipped"}`, 422, "invalid_template"},
		"data not object":   {l.Svc, `{"user_id":"user-0042","event_key":"k1","template":"t","data":[1,2]}`, 422, "invalid_data"},
		"data too large":    {l.Svc, `{"user_id":"user-0042","event_key":"k1","template":"t","data":` + big + `}`, 422, "data_too_large"},
		"unknown field":     {l.Svc, `{"user_id":"user-0042","event_key":"k1","template":"t","channel":"sms"}`, 400, "unknown_field"},
		"malformed":         {l.Svc, `{"user_id":`, 400, "malformed_json"},
		"user token":        {user42, `{"user_id":"user-0042","event_key":"k1","template":"t"}`, 403, "forbidden"},
		"no token":          {"", `{"user_id":"user-0042","event_key":"k1","template":"t"}`, 401, "unauthorized"},
	} {
		r := l.Do(t, e2etest.Req{Method: "POST", Path: "/notify/events", Token: tc.token, Body: tc.body, Invalid: true})
		require.Equal(t, tc.status, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, tc.code, r.Code(), name)
	}

	prefs := "/notify/users/user-0042/preferences"
	for name, tc := range map[string]struct {
		path, token, body string
		status            int
		code              string
	}{
		"unknown channel":   {prefs, user42, `{"channels":{"email":true,"fax":true}}`, 422, "unknown_channel"},
		"missing channels":  {prefs, user42, `{}`, 422, "channels_required"},
		"not a boolean":     {prefs, user42, `{"channels":{"email":"yes"}}`, 400, "invalid_field"},
		"another user":      {"/notify/users/user-0043/preferences", user42, `{"channels":{"email":true}}`, 403, "forbidden"},
		"service token":     {prefs, l.Svc, `{"channels":{"email":true}}`, 403, "forbidden"},
		"admin, invalid id": {"/notify/users/user%20x/preferences", l.Admin, `{"channels":{"email":true}}`, 400, "invalid_id"},
	} {
		r := l.Do(t, e2etest.Req{Method: "PUT", Path: tc.path, Token: tc.token, Body: tc.body, Invalid: true})
		require.Equal(t, tc.status, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, tc.code, r.Code(), name)
	}

	// With an Idempotency-Key the refusal is a business answer: recorded and
	// replayed byte for byte, and still nothing of the module is written.
	req := e2etest.Req{Method: "POST", Path: "/notify/events", Token: l.Svc, Headers: map[string]string{"Idempotency-Key": "ev-unknown-1"},
		Body: `{"user_id":"user-9999","event_key":"order:ord-1:shipped","template":"order_shipped"}`}
	first, again := l.Do(t, req), l.Do(t, req)
	require.Equal(t, 404, first.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Body, again.Body)

	for _, table := range []string{"notify_user", "notify_preference", "notify_notification", "notify_task", "notify_attempt", "job"} {
		require.Zero(t, l.Count(t, `SELECT count(*) FROM `+table), "%s must stay empty", table)
	}
	e2etest.Assert(t, l.Pool, "notify")
}

// Preferences belong to their user (admins may set them; services may read
// them); a notification is visible to its user, admins and services.
func TestNotificationsAndPreferencesAreVisibleOnlyToTheirUserAndStaff(t *testing.T) {
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{})
	user42, user43 := l.Token(t, "user-0042", httpx.RoleUser), l.Token(t, "user-0043", httpx.RoleUser)
	r := l.Do(t, e2etest.Req{Method: "PUT", Path: "/notify/users/user-0042/preferences", Token: l.Admin,
		Body: `{"channels":{"email":true,"push":true}}`})
	require.Equal(t, 200, r.Status, string(r.Body))
	var p notify.Preferences
	r.JSON(t, &p)
	require.Equal(t, map[string]bool{"email": true, "sms": false, "push": true}, p.Channels, "a channel left out is off")
	require.Equal(t, "admin-0001", p.UpdatedBy)

	n := l.Submit(t, notifylab.LabEvent("user-0042", "order:ord-2001:shipped"))
	path := fmt.Sprintf("/notify/notifications/%d", n.ID)
	for name, tc := range map[string]struct {
		method, path, token string
		status              int
	}{
		"own notification":      {"GET", path, user42, 200},
		"another's":             {"GET", path, user43, 403},
		"admin":                 {"GET", path, l.Admin, 200},
		"service":               {"GET", path, l.Svc, 200},
		"no token":              {"GET", path, "", 401},
		"unknown notification":  {"GET", "/notify/notifications/999999", l.Admin, 404},
		"bad id":                {"GET", "/notify/notifications/abc", l.Admin, 400},
		"own preferences":       {"GET", "/notify/users/user-0042/preferences", user42, 200},
		"another's preferences": {"GET", "/notify/users/user-0042/preferences", user43, 403},
		"service preferences":   {"GET", "/notify/users/user-0042/preferences", l.Svc, 200},
		"unknown user":          {"GET", "/notify/users/user-0099/preferences", l.Admin, 404},
		"review as user":        {"GET", "/notify/review", user42, 403},
		"review as service":     {"GET", "/notify/review", l.Svc, 403},
	} {
		r := l.Do(t, e2etest.Req{Method: tc.method, Path: tc.path, Token: tc.token, Invalid: name == "bad id"})
		require.Equal(t, tc.status, r.Status, "%s: %s", name, r.Body)
		if r.Status == 200 {
			// Personal reads are never cached (issue 20 item 17).
			require.Equal(t, "no-store", r.Header.Get("Cache-Control"), name)
		}
	}
	var got notify.Notification
	l.Do(t, e2etest.Req{Method: "GET", Path: path, Token: user42}).JSON(t, &got)
	require.Equal(t, "svc-orders", got.SubmittedBy)
	require.JSONEq(t, `{"order":"ord-1001","carrier":"example-post"}`, string(got.Data))
	require.Len(t, got.Tasks, 2)
	e2etest.Assert(t, l.Pool, "notify")
}

// The review queue's three ways out, each recorded with who and why: resend
// (the person accepts a possible duplicate on a channel without keys), give
// up, and delivered. A task not in review cannot be decided on; a decision
// with an Idempotency-Key replays.
func TestReviewDecisionsAreRecordedWithWhoAndWhy(t *testing.T) {
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{})
	ctx := context.Background()
	l.Prefs(t, "user-0042", map[string]bool{notify.ChannelPush: true})
	l.Push().Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: 3, DropResponse: true})
	var tasks []notify.Task
	for i := range 3 {
		n := l.Submit(t, notifylab.LabEvent("user-0042", fmt.Sprintf("order:ord-30%02d:shipped", i)))
		tk := n.Tasks[0]
		jobs := l.ClaimAs(t, notify.ChannelPush, "worker-1")
		require.Len(t, jobs, 1)
		require.NoError(t, l.Jobs.Execute(ctx, jobs[0]))
		l.DueNow(t, tk.JobID)
		_, err := l.Jobs.ResolveUnknown(ctx, 10, 1)
		require.NoError(t, err)
		tasks = append(tasks, tk)
	}
	var page notify.ReviewPage
	l.Do(t, e2etest.Req{Method: "GET", Path: "/notify/review?limit=2", Token: l.Admin}).JSON(t, &page)
	require.Len(t, page.Items, 2)
	require.Equal(t, fmt.Sprint(page.Items[1].Task.ID), page.Next)
	var last notify.ReviewPage
	l.Do(t, e2etest.Req{Method: "GET", Path: "/notify/review?limit=2&after=" + page.Next, Token: l.Admin}).JSON(t, &last)
	require.Len(t, last.Items, 1)
	require.Empty(t, last.Next)

	resolve := func(tk notify.Task, action, reason string, headers map[string]string) e2etest.Response {
		return l.Do(t, e2etest.Req{Method: "POST", Path: fmt.Sprintf("/notify/review/%d/resolve", tk.ID), Token: l.Admin,
			Headers: headers, Body: notify.ResolveRequest{Action: action, Reason: reason}})
	}
	for name, tc := range map[string]struct {
		action, reason string
		code           string
	}{
		"unknown action": {"retry", "why not", "invalid_action"},
		"no reason":      {notify.ActionResend, "", "invalid_reason"},
		"blank reason":   {notify.ActionResend, "   ", "invalid_reason"},
	} {
		r := l.Do(t, e2etest.Req{Method: "POST", Path: fmt.Sprintf("/notify/review/%d/resolve", tasks[0].ID), Token: l.Admin,
			Body: notify.ResolveRequest{Action: tc.action, Reason: tc.reason}, Invalid: true})
		require.Equal(t, 422, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, tc.code, r.Code(), name)
	}

	// resend: sent again now, a second message on a channel without keys.
	key := map[string]string{"Idempotency-Key": "review-resend-1"}
	r := resolve(tasks[0], notify.ActionResend, "device was offline; the user asked again", key)
	require.Equal(t, 200, r.Status, string(r.Body))
	replay := resolve(tasks[0], notify.ActionResend, "device was offline; the user asked again", key)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, r.Body, replay.Body)
	var after notify.Task
	r.JSON(t, &after)
	require.Equal(t, notify.TaskQueued, after.State)
	jobs := l.ClaimAs(t, notify.ChannelPush, "worker-2")
	require.Len(t, jobs, 1)
	require.NoError(t, l.Jobs.Execute(ctx, jobs[0]))
	require.Len(t, l.Push().EffectsFor(tasks[0].DeliveryKey), 2, "the person chose a possible duplicate over silence")

	r = resolve(tasks[1], notify.ActionGiveUp, "promotion expired", nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	r = resolve(tasks[2], notify.ActionDelivered, "seen on the device log", nil)
	require.Equal(t, 200, r.Status, string(r.Body))

	for i, want := range []string{notify.TaskDelivered, notify.TaskFailed, notify.TaskDelivered} {
		tk := notifylab.LabTask(t, l.Get(t, tasks[i].NotificationID), notify.ChannelPush)
		require.Equal(t, want, tk.State, "task %d", i)
		require.Len(t, tk.Decisions, 1)
		require.Equal(t, "admin-0001", tk.Decisions[0].DecidedBy)
	}
	r = resolve(tasks[2], notify.ActionResend, "changed my mind", nil)
	require.Equal(t, 409, r.Status, string(r.Body))
	require.Equal(t, "not_in_review", r.Code())
	r = l.Do(t, e2etest.Req{Method: "POST", Path: "/notify/review/999999/resolve", Token: l.Admin,
		Body: notify.ResolveRequest{Action: notify.ActionGiveUp, Reason: "x"}})
	require.Equal(t, 404, r.Status)
	require.Equal(t, "task_not_found", r.Code())
	require.Equal(t, 3, l.Count(t, `SELECT count(*) FROM notify_review_decision`), "refused decisions leave no record")
	var empty notify.ReviewPage
	l.Do(t, e2etest.Req{Method: "GET", Path: "/notify/review", Token: l.Admin}).JSON(t, &empty)
	require.Empty(t, empty.Items, "nothing left to decide")
	e2etest.Assert(t, l.Pool, "notify")
	e2etest.Assert(t, l.Pool, "claim")
}
