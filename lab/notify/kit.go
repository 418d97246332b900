package notify

// The kit the notification chapter's experiments (and its e2e tests) drive
// the app with: three fake channels with the spec's contracts (email:
// keys; sms: query; push: neither) whose effect ledgers are the ground
// truth for "sent".

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/notify"
)

// Lab is one experiment's world: the app on a fresh database, pointed at
// three fake channels with the spec's contracts (email: keys; sms: query;
// Push: neither).
type Lab struct {
	*lab.App
	Channels map[string]*fakeprovider.Server
	Svc      string // a service token (event intake)
	Admin    string // an admin token (review)
}

func StartLab(x *lab.X, o lab.Options) Lab {
	t := x
	t.Helper()
	l := Lab{Channels: map[string]*fakeprovider.Server{}}
	s := map[string]string{}
	for k, v := range o.Settings {
		s[k] = v
	}
	for _, ch := range notify.Channels {
		srv, err := fakeprovider.Start(ch.Capabilities())
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		l.Channels[ch.Name] = srv
		s[map[string]string{notify.ChannelEmail: notify.EnvEmailURL, notify.ChannelSMS: notify.EnvSMSURL,
			notify.ChannelPush: notify.EnvPushURL}[ch.Name]] = srv.URL()
	}
	for k, v := range o.Settings {
		s[k] = v
	}
	o.Settings = s
	l.App = x.Start(o)
	l.Svc = l.Token(t, "svc-orders", httpx.RoleService)
	l.Admin = l.Token(t, "admin-0001", httpx.RoleAdmin)
	return l
}

func (l Lab) Email() *fakeprovider.Server { return l.Channels[notify.ChannelEmail] }
func (l Lab) Sms() *fakeprovider.Server   { return l.Channels[notify.ChannelSMS] }
func (l Lab) Push() *fakeprovider.Server  { return l.Channels[notify.ChannelPush] }

// Prefs stores a user's channel set as the user.
func (l Lab) Prefs(t lab.T, user string, channels map[string]bool) {
	t.Helper()
	r := l.Do(t, lab.Req{Method: "PUT", Path: "/notify/users/" + user + "/preferences",
		Token: l.Token(t, user, httpx.RoleUser), Body: notify.PreferencesRequest{Channels: channels}})
	require.Equal(t, 200, r.Status, string(r.Body))
}

var AllChannels = map[string]bool{notify.ChannelEmail: true, notify.ChannelSMS: true, notify.ChannelPush: true}

// Shipped is the start of the timelines that deliver one event on every
// channel: user-0042 turns all three channels on and the service submits
// the order_shipped event under eventKey; the notification comes back
// with its three tasks.
func (l Lab) Shipped(t lab.T, eventKey string) notify.Notification {
	t.Helper()
	l.Prefs(t, "user-0042", AllChannels)
	return l.Submit(t, LabEvent("user-0042", eventKey))
}

// LabEvent is the experiments' order_shipped event.
func LabEvent(user, key string) notify.EventRequest {
	return notify.EventRequest{UserID: user, EventKey: key, Template: "order_shipped",
		Data: []byte(`{"order":"ord-1001","carrier":"example-post"}`)}
}

// Submit posts an event as the service and returns the notification.
func (l Lab) Submit(t lab.T, ev notify.EventRequest) notify.Notification {
	t.Helper()
	n, err := l.SubmitErr(ev)
	require.NoError(t, err)
	return n
}

// SubmitErr is submit for goroutines: it reports instead of failing.
func (l Lab) SubmitErr(ev notify.EventRequest) (notify.Notification, error) {
	var n notify.Notification
	r, err := l.Send(context.Background(), lab.Req{Method: "POST", Path: "/notify/events", Token: l.Svc, Body: ev})
	if err != nil {
		return n, err
	}
	if r.Status != 200 && r.Status != 201 {
		return n, fmt.Errorf("submit %s: %d %s", ev.EventKey, r.Status, r.Body)
	}
	return n, json.Unmarshal(r.Body, &n)
}

// Get reads a notification with its tasks and attempts (as admin).
func (l Lab) Get(t lab.T, id int64) notify.Notification {
	t.Helper()
	r := l.Do(t, lab.Req{Method: "GET", Path: fmt.Sprintf("/notify/notifications/%d", id), Token: l.Admin})
	require.Equal(t, 200, r.Status, string(r.Body))
	var n notify.Notification
	r.JSON(t, &n)
	return n
}

func LabTask(t lab.T, n notify.Notification, channel string) notify.Task {
	t.Helper()
	for _, tk := range n.Tasks {
		if tk.Channel == channel {
			return tk
		}
	}
	t.Fatalf("notification %d has no %s task", n.ID, channel)
	return notify.Task{}
}

// ClaimAs claims one job of channel's kind under owner.
func (l Lab) ClaimAs(t lab.T, channel, owner string) []*claim.Job {
	t.Helper()
	ch, _ := channelNamed(channel)
	jobs, err := l.Jobs.Claim(context.Background(), claim.ClaimParams{Owner: owner, Kinds: []string{ch.Kind()}})
	require.NoError(t, err)
	return jobs
}

// RunAs claims channel's one ready job under owner and runs it: one
// worker's delivery attempt.
func (l Lab) RunAs(t lab.T, channel, owner string) {
	t.Helper()
	jobs := l.ClaimAs(t, channel, owner)
	require.Len(t, jobs, 1)
	require.NoError(t, l.Jobs.Execute(context.Background(), jobs[0]))
}

func channelNamed(name string) (notify.Channel, bool) {
	for _, c := range notify.Channels {
		if c.Name == name {
			return c, true
		}
	}
	return notify.Channel{}, false
}

// DueNow moves a job's due time to now: the exact boundary instead of a wait
// for its backoff or the resolver's jitter.
func (l Lab) DueNow(t lab.T, jobID int64) {
	t.Helper()
	_, err := l.Pool.Exec(context.Background(), `UPDATE job SET due_at = now() WHERE id = $1`, jobID)
	require.NoError(t, err)
}

// History is a job's events as "event:fence".
func (l Lab) History(t lab.T, jobID int64) []string {
	t.Helper()
	return lab.JobHistory(t, l.Pool, jobID)
}

// LabCalls summarises a task's attempts as "op:outcome@fence".
func LabCalls(tk notify.Task) []string {
	out := []string{}
	for _, a := range tk.Attempts {
		out = append(out, fmt.Sprintf("%s:%s@%d", a.Op, a.Outcome, a.Fence))
	}
	return out
}
