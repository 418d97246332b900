package contract_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// TestServerAnswersWhatTheContractSays: three answers a client author met
// that the document did not lead them to expect.
func TestServerAnswersWhatTheContractSays(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	for _, m := range a.Mods {
		if m.Name == "notify" {
			require.NoError(t, m.Seed(context.Background())) // the demo users notify knows
		}
	}
	u42 := a.Token(t, "user-0042", httpx.RoleUser)

	t.Run("relation with a user who never used the service is 404, as follow is", func(t *testing.T) {
		r := a.Do(t, e2etest.Req{Method: "PUT", Path: "/social/me", Token: u42, Body: map[string]any{"private": false}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = a.Do(t, e2etest.Req{Method: "GET", Path: "/social/users/user-0045/relation", Token: u42})
		require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
		require.Equal(t, "user_not_found", r.Code())
		r = a.Do(t, e2etest.Req{Method: "POST", Path: "/social/users/user-0045/follow", Token: u42})
		require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
		require.Equal(t, "user_not_found", r.Code())

		// A user who exists and was never followed: state none, no zero time.
		u45 := a.Token(t, "user-0045", httpx.RoleUser)
		r = a.Do(t, e2etest.Req{Method: "PUT", Path: "/social/me", Token: u45, Body: map[string]any{"private": false}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = a.Do(t, e2etest.Req{Method: "GET", Path: "/social/users/user-0045/relation", Token: u42})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var rel map[string]map[string]any
		r.JSON(t, &rel)
		for _, side := range []string{"outgoing", "incoming"} {
			require.Equal(t, "none", rel[side]["state"], side)
			require.EqualValues(t, 0, rel[side]["version"], side)
			require.NotContains(t, rel[side], "updated_at", "%s: no change, no time: %s", side, r.Body)
		}
		require.NotContains(t, string(r.Body), "0001-01-01")

		// Once followed, the time of the change is there.
		r = a.Do(t, e2etest.Req{Method: "POST", Path: "/social/users/user-0045/follow", Token: u42})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = a.Do(t, e2etest.Req{Method: "GET", Path: "/social/users/user-0045/relation", Token: u42})
		r.JSON(t, &rel)
		require.Equal(t, "active", rel["outgoing"]["state"])
		require.NotEmpty(t, rel["outgoing"]["updated_at"])
	})

	t.Run("an event naming an unknown template is 422 unknown_template", func(t *testing.T) {
		svc := a.Token(t, "svc-orders", httpx.RoleService)
		r := a.Do(t, e2etest.Req{Method: "POST", Path: "/notify/events", Token: svc,
			Body: map[string]any{"user_id": "user-0042", "event_key": "order:ord-7:lost", "template": "order_lost"}})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		require.Equal(t, "unknown_template", r.Code())
		var p map[string]any
		r.JSON(t, &p)
		require.Equal(t, "template", p["field"])
		require.Contains(t, p["detail"], "order_shipped", "the detail names the templates there are")
		require.Zero(t, a.Count(t, `SELECT count(*) FROM notify_notification WHERE event_key = 'order:ord-7:lost'`), "nothing recorded")

		r = a.Do(t, e2etest.Req{Method: "POST", Path: "/notify/events", Token: svc,
			Body: map[string]any{"user_id": "user-0042", "event_key": "order:ord-7:shipped", "template": "order_shipped"}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	})

	t.Run("a method the path does not serve is 405 with Allow, as the document says", func(t *testing.T) {
		r := a.Do(t, e2etest.Req{Method: "GET", Path: "/points/accounts", Token: u42, Invalid: true})
		require.Equal(t, http.StatusMethodNotAllowed, r.Status, string(r.Body))
		require.Equal(t, httpx.ProblemContentType, r.Header.Get("Content-Type"))
		require.Equal(t, "method_not_allowed", r.Code())
		allow := r.Header.Get("Allow")
		require.Contains(t, allow, "POST")
		require.NotContains(t, allow, "GET")
	})
}
