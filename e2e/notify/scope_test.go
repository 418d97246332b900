package notify_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
	"github.com/fencelab/fencelab/services/notify"
)

// Issue 36: an event_key is the submitting service's own. svc-0002
// posting svc-0001's key for the same user makes svc-0002's notification
// (201, its own template and data), never answers with svc-0001's; and a
// service reads by id only the notifications it submitted. A repeat by the
// same service is still the one notification (NTF-I1).
func TestAServiceCannotReadAnotherServicesNotification(t *testing.T) {
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{})
	l.Prefs(t, "user-0042", notifylab.AllChannels)
	svc1 := l.Token(t, "svc-0001", httpx.RoleService)
	svc2 := l.Token(t, "svc-0002", httpx.RoleService)
	submit := func(tok, template, data string) (int, notify.Notification) {
		r := l.Do(t, lab.Req{Method: "POST", Path: "/notify/events", Token: tok, Body: notify.EventRequest{
			UserID: "user-0042", EventKey: "order:ord-1001:shipped", Template: template, Data: []byte(data)}})
		var n notify.Notification
		r.JSON(t, &n)
		return r.Status, n
	}

	status, first := submit(svc1, "order_shipped", `{"secret":"svc-0001's"}`)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "svc-0001", first.SubmittedBy)

	status, other := submit(svc2, "order_shipped", `{"locker":"L-17"}`)
	require.Equal(t, http.StatusCreated, status, "another service's key is another event")
	require.NotEqual(t, first.ID, other.ID)
	require.Equal(t, "svc-0002", other.SubmittedBy)
	require.Equal(t, "order_shipped", other.Template)
	require.JSONEq(t, `{"locker":"L-17"}`, string(other.Data), "svc-0002 sees its own data, never svc-0001's")
	require.Len(t, other.Tasks, len(notify.Channels), "svc-0002's event gets its own deliveries")

	// The same service again: the one notification it made (NTF-I1).
	status, again := submit(svc1, "order_shipped", `{"secret":"svc-0001's"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, first.ID, again.ID)

	read := func(tok string, id int64) lab.Response {
		return l.Do(t, lab.Req{Method: "GET", Path: fmt.Sprintf("/notify/notifications/%d", id), Token: tok, Invalid: true})
	}
	require.Equal(t, http.StatusOK, read(svc1, first.ID).Status)
	require.Equal(t, http.StatusOK, read(svc2, other.ID).Status)
	for _, c := range []struct {
		tok string
		id  int64
	}{{svc2, first.ID}, {svc1, other.ID}, {l.Token(t, "user-0043", httpx.RoleUser), first.ID}} {
		r := read(c.tok, c.id)
		require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
		require.NotContains(t, string(r.Body), "secret")
	}
	// The user it is for, and an admin, read both.
	for _, tok := range []string{l.Token(t, "user-0042", httpx.RoleUser), l.Admin} {
		require.Equal(t, http.StatusOK, read(tok, first.ID).Status)
		require.Equal(t, http.StatusOK, read(tok, other.ID).Status)
	}

	require.Equal(t, 2, l.Count(t, `SELECT count(*) FROM notify_notification WHERE user_id = 'user-0042'`))
	e2etest.Assert(t, l.Pool, "notify")
}
