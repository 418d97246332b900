// Package notify_test runs the notification chapter's experiments against
// the real app, real PostgreSQL and three fake channels whose effect
// ledgers are the ground truth for "sent".
package notify_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/notify"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// lab is one experiment's world: the app on a fresh database, pointed at
// three fake channels with the spec's contracts (email: keys; sms: query;
// push: neither).
type lab struct {
	*e2etest.App
	channels map[string]*fakeprovider.Server
	svc      string // a service token (event intake)
	admin    string // an admin token (review)
}

func newLab(t *testing.T, settings map[string]string, o e2etest.Options) lab {
	t.Helper()
	l := lab{channels: map[string]*fakeprovider.Server{}}
	s := map[string]string{}
	for k, v := range settings {
		s[k] = v
	}
	for _, ch := range notify.Channels {
		srv, err := fakeprovider.Start(ch.Capabilities())
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		l.channels[ch.Name] = srv
		s[map[string]string{notify.ChannelEmail: notify.EnvEmailURL, notify.ChannelSMS: notify.EnvSMSURL,
			notify.ChannelPush: notify.EnvPushURL}[ch.Name]] = srv.URL()
	}
	for k, v := range o.Settings {
		s[k] = v
	}
	o.Settings = s
	l.App = e2etest.Start(t, o)
	l.svc = l.Token(t, "svc-orders", httpx.RoleService)
	l.admin = l.Token(t, "admin-0001", httpx.RoleAdmin)
	return l
}

func (l lab) email() *fakeprovider.Server { return l.channels[notify.ChannelEmail] }
func (l lab) sms() *fakeprovider.Server   { return l.channels[notify.ChannelSMS] }
func (l lab) push() *fakeprovider.Server  { return l.channels[notify.ChannelPush] }

// prefs stores a user's channel set as the user.
func (l lab) prefs(t *testing.T, user string, channels map[string]bool) {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: "PUT", Path: "/notify/users/" + user + "/preferences",
		Token: l.Token(t, user, httpx.RoleUser), Body: notify.PreferencesRequest{Channels: channels}})
	require.Equal(t, 200, r.Status, string(r.Body))
}

var all = map[string]bool{notify.ChannelEmail: true, notify.ChannelSMS: true, notify.ChannelPush: true}

func event(user, key string) notify.EventRequest {
	return notify.EventRequest{UserID: user, EventKey: key, Template: "order_shipped",
		Data: []byte(`{"order":"ord-1001","carrier":"example-post"}`)}
}

// submit posts an event as the service and returns the notification.
func (l lab) submit(t *testing.T, ev notify.EventRequest) notify.Notification {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: "POST", Path: "/notify/events", Token: l.svc, Body: ev})
	require.Contains(t, []int{200, 201}, r.Status, string(r.Body))
	var n notify.Notification
	r.JSON(t, &n)
	return n
}

// get reads a notification with its tasks and attempts (as admin).
func (l lab) get(t *testing.T, id int64) notify.Notification {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: "GET", Path: fmt.Sprintf("/notify/notifications/%d", id), Token: l.admin})
	require.Equal(t, 200, r.Status, string(r.Body))
	var n notify.Notification
	r.JSON(t, &n)
	return n
}

func task(t *testing.T, n notify.Notification, channel string) notify.Task {
	t.Helper()
	for _, tk := range n.Tasks {
		if tk.Channel == channel {
			return tk
		}
	}
	t.Fatalf("notification %d has no %s task", n.ID, channel)
	return notify.Task{}
}

// claimAs claims one job of channel's kind under owner.
func (l lab) claimAs(t *testing.T, channel, owner string) []*claim.Job {
	t.Helper()
	ch, _ := channelNamed(channel)
	jobs, err := l.Deps.Jobs.Claim(context.Background(), claim.ClaimParams{Owner: owner, Kinds: []string{ch.Kind()}})
	require.NoError(t, err)
	return jobs
}

func channelNamed(name string) (notify.Channel, bool) {
	for _, c := range notify.Channels {
		if c.Name == name {
			return c, true
		}
	}
	return notify.Channel{}, false
}

// dueNow moves a job's due time to now: the exact boundary instead of a wait
// for its backoff or the resolver's jitter.
func (l lab) dueNow(t *testing.T, jobID int64) {
	t.Helper()
	_, err := l.Pool.Exec(context.Background(), `UPDATE job SET due_at = now() WHERE id = $1`, jobID)
	require.NoError(t, err)
}

func (l lab) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, l.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// history is a job's events as "event:fence".
func (l lab) history(t *testing.T, jobID int64) []string {
	t.Helper()
	rows, err := l.Pool.Query(context.Background(), `SELECT event || ':' || fence FROM job_event WHERE job_id = $1 ORDER BY id`, jobID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// calls summarises a task's attempts as "op:outcome@fence".
func calls(tk notify.Task) []string {
	out := []string{}
	for _, a := range tk.Attempts {
		out = append(out, fmt.Sprintf("%s:%s@%d", a.Op, a.Outcome, a.Fence))
	}
	return out
}
