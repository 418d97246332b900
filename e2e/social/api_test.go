package social_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	relations "github.com/fencelab/fencelab/lab/relations"
	"github.com/fencelab/fencelab/services/social/rel"
)

// TestRELSecurityReadsAndActingAsAnother: a FOLLOWERS post is refused to
// a non-follower (403), to a blocked follower (403, and PUBLIC posts too,
// both directions of the block), to a forged, expired or missing token
// (401); nobody follows, approves or edits on another's behalf.
func TestRELSecurityReadsAndActingAsAnother(t *testing.T) {
	e := e2etest.StartLab(t, relations.StartLab, e2etest.Options{})
	for _, u := range []string{"user-ownerp", "user-fan", "user-stranger", "user-c"} {
		relations.RequireStatus(t, e.Call(t, u, "PUT", "/social/me", map[string]any{"private": strings.HasSuffix(u, "p")}), http.StatusOK, "")
	}
	relations.RequireStatus(t, e.Call(t, "user-fan", "POST", "/social/users/user-ownerp/follow", nil), http.StatusOK, "")
	relations.RequireStatus(t, e.Call(t, "user-ownerp", "POST", "/social/requests/user-fan/approve", nil), http.StatusOK, "")
	var followersOnly, public, self rel.Post
	for v, dst := range map[rel.Visibility]*rel.Post{rel.Followers: &followersOnly, rel.Public: &public, rel.Self: &self} {
		r := e.Call(t, "user-ownerp", "POST", "/social/posts", rel.PostRequest{Body: "hello " + string(v), Visibility: v})
		relations.RequireStatus(t, r, http.StatusCreated, "")
		r.JSON(t, dst)
	}
	path := func(p rel.Post) string { return fmt.Sprintf("/social/posts/%d", p.PostID) }

	relations.RequireStatus(t, e.Read(t, "user-fan", followersOnly.PostID), http.StatusOK, "")
	relations.RequireStatus(t, e.Read(t, "user-stranger", followersOnly.PostID), http.StatusForbidden, "forbidden")
	relations.RequireStatus(t, e.Read(t, "user-stranger", public.PostID), http.StatusOK, "")
	relations.RequireStatus(t, e.Read(t, "user-fan", self.PostID), http.StatusForbidden, "forbidden")
	relations.RequireStatus(t, e.Read(t, "user-ownerp", self.PostID), http.StatusOK, "")
	relations.RequireStatus(t, e.Read(t, "user-fan", 999999), http.StatusNotFound, "post_not_found")
	relations.RequireStatus(t, e.BadCall(t, "user-fan", "GET", "/social/posts/abc", nil), http.StatusBadRequest, "invalid_id")

	// Tokens: forged (another secret), expired, missing, wrong role.
	other, err := httpx.NewAuth([]byte("not-the-app-secret-0123456789"))
	require.NoError(t, err)
	forged, err := other.Mint("user-fan", httpx.RoleUser, time.Hour)
	require.NoError(t, err)
	relations.RequireStatus(t, e.Do(t, e2etest.Req{Method: "GET", Path: path(followersOnly), Token: forged}), http.StatusUnauthorized, "unauthorized")
	relations.RequireStatus(t, e.Do(t, e2etest.Req{Method: "POST", Path: "/social/users/user-ownerp/follow", Token: forged}), http.StatusUnauthorized, "unauthorized")
	relations.RequireStatus(t, e.Do(t, e2etest.Req{Method: "GET", Path: path(followersOnly)}), http.StatusUnauthorized, "unauthorized")
	tampered := e.UserToken(t, "user-stranger")
	tampered = tampered[:len(tampered)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(tampered, "AA")]
	relations.RequireStatus(t, e.Do(t, e2etest.Req{Method: "GET", Path: path(followersOnly), Token: tampered}), http.StatusUnauthorized, "unauthorized")
	svc := e.Token(t, "svc-0001", httpx.RoleService)
	relations.RequireStatus(t, e.Do(t, e2etest.Req{Method: "GET", Path: path(public), Token: svc}), http.StatusForbidden, "forbidden")

	// Acting for someone else: the follower is always the token's subject.
	relations.RequireStatus(t, e.Call(t, "user-stranger", "POST", "/social/users/user-ownerp/follow", map[string]string{"follower": "user-c"}),
		http.StatusBadRequest, "unknown_field")
	r := e.Call(t, "user-stranger", "POST", "/social/users/user-ownerp/follow?follower=user-c", nil)
	relations.RequireStatus(t, r, http.StatusOK, "")
	var res rel.Result
	r.JSON(t, &res)
	require.Equal(t, "user-stranger", res.Follower)
	require.Equal(t, rel.StatePending, res.State)
	_, cRow, err := e.Svc.Relations(t.Context(), "user-ownerp", "user-c")
	require.NoError(t, err)
	require.EqualValues(t, 0, cRow.Version, "user-c follows nobody")
	// user-c cannot approve a request made to user-ownerp.
	relations.RequireStatus(t, e.Call(t, "user-c", "POST", "/social/requests/user-stranger/approve", nil), http.StatusConflict, "not_pending")
	relations.RequireStatus(t, e.Read(t, "user-stranger", followersOnly.PostID), http.StatusForbidden, "forbidden")
	// Nor edit another's post.
	relations.RequireStatus(t, e.Call(t, "user-fan", "PATCH", path(followersOnly), rel.VisibilityRequest{Visibility: rel.Public}), http.StatusForbidden, "not_author")
	relations.RequireStatus(t, e.Call(t, "user-stranger", "PATCH", path(followersOnly), rel.VisibilityRequest{Visibility: rel.Public}), http.StatusForbidden, "forbidden")
	relations.RequireStatus(t, e.Read(t, "user-stranger", followersOnly.PostID), http.StatusForbidden, "forbidden")
	// A private account's lists are for its followers.
	relations.RequireStatus(t, e.Call(t, "user-stranger", "GET", "/social/users/user-ownerp/followers", nil), http.StatusForbidden, "forbidden")
	relations.RequireStatus(t, e.Call(t, "user-fan", "GET", "/social/users/user-ownerp/followers", nil), http.StatusOK, "")

	// A block: the blocked follower loses FOLLOWERS and PUBLIC, and so
	// does the blocker towards the blocked.
	relations.RequireStatus(t, e.Call(t, "user-ownerp", "POST", "/social/users/user-fan/block", nil), http.StatusOK, "")
	relations.RequireStatus(t, e.Read(t, "user-fan", followersOnly.PostID), http.StatusForbidden, "forbidden")
	relations.RequireStatus(t, e.Read(t, "user-fan", public.PostID), http.StatusForbidden, "forbidden")
	fanPost := e.Post(t, "user-fan", rel.Public)
	relations.RequireStatus(t, e.Read(t, "user-ownerp", fanPost.PostID), http.StatusForbidden, "forbidden")
	relations.RequireStatus(t, e.Call(t, "user-fan", "POST", "/social/users/user-ownerp/follow", nil), http.StatusForbidden, "blocked")
	relations.RequireStatus(t, e.Call(t, "user-ownerp", "POST", "/social/users/user-fan/follow", nil), http.StatusConflict, "you_block")
	relations.RequireStatus(t, e.Call(t, "user-ownerp", "POST", "/social/users/user-fan/unblock", nil), http.StatusOK, "")
	relations.RequireStatus(t, e.Read(t, "user-fan", public.PostID), http.StatusOK, "")
	relations.RequireStatus(t, e.Read(t, "user-fan", followersOnly.PostID), http.StatusForbidden, "forbidden") // no follow comes back

	// Bounds: a client's mistake is a 4xx.
	relations.RequireStatus(t, e.Call(t, "user-c", "POST", "/social/users/user-c/follow", nil), http.StatusUnprocessableEntity, "self_relation")
	relations.RequireStatus(t, e.Call(t, "user-c", "POST", "/social/users/user-nobody/follow", nil), http.StatusNotFound, "user_not_found")
	relations.RequireStatus(t, e.BadCall(t, "user-c", "POST", "/social/users/bad%20id/follow", nil), http.StatusBadRequest, "invalid_id")
	relations.RequireStatus(t, e.BadCall(t, "user-c", "POST", "/social/posts", rel.PostRequest{Body: "x", Visibility: "FRIENDS"}), http.StatusUnprocessableEntity, "invalid_visibility")
	relations.RequireStatus(t, e.BadCall(t, "user-c", "POST", "/social/posts", rel.PostRequest{Body: strings.Repeat("x", rel.MaxBody+1), Visibility: rel.Public}), http.StatusUnprocessableEntity, "invalid_body")
	relations.RequireStatus(t, e.BadCall(t, "user-c", "GET", "/social/users/user-c/followers?limit=100000", nil), http.StatusBadRequest, "invalid_limit")
	relations.RequireStatus(t, e.BadCall(t, "user-c", "GET", "/social/users/user-ownerp/posts?cursor=!!", nil), http.StatusBadRequest, "invalid_cursor")
	relations.RequireStatus(t, e.BadCall(t, "user-c", "GET", "/social/users/user-ownerp/posts?cursor=bm90LWEtY3Vyc29y", nil), http.StatusBadRequest, "invalid_cursor")
	relations.RequireStatus(t, e.Call(t, "user-c", "GET", "/social/views", nil), http.StatusForbidden, "forbidden")
	e.CatchUp(t)
	e2etest.Assert(t, e.Pool, "social")
}

// TestRELAPIListsCountsTimelineAndLag walks the HTTP API: follows,
// requests, lists and counts (from the views, with their lag), a
// timeline paged by cursor while posts keep arriving, an idempotent post,
// visibility changes, the admin view-lag endpoint and the metrics.
func TestRELAPIListsCountsTimelineAndLag(t *testing.T) {
	e := e2etest.StartLab(t, relations.StartLab, e2etest.Options{})
	for _, u := range []string{"user-a", "user-b", "user-cp"} {
		relations.RequireStatus(t, e.Call(t, u, "PUT", "/social/me", map[string]bool{"private": strings.HasSuffix(u, "p")}), http.StatusOK, "")
	}
	relations.RequireStatus(t, e.BadCall(t, "user-a", "PUT", "/social/me", map[string]any{}), http.StatusUnprocessableEntity, "missing_field")
	relations.RequireStatus(t, e.Call(t, "user-a", "POST", "/social/users/user-b/follow", nil), http.StatusOK, "")
	relations.RequireStatus(t, e.Call(t, "user-a", "POST", "/social/users/user-cp/follow", nil), http.StatusOK, "")
	relations.RequireStatus(t, e.Call(t, "user-b", "POST", "/social/users/user-cp/follow", nil), http.StatusOK, "")

	var reqs rel.Page
	r := e.Call(t, "user-cp", "GET", "/social/requests?limit=1", nil)
	relations.RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &reqs)
	require.Equal(t, []string{"user-a"}, reqs.Users)
	require.Equal(t, "user-a", reqs.Next)
	r = e.Call(t, "user-cp", "GET", "/social/requests?after="+reqs.Next, nil)
	r.JSON(t, &reqs)
	require.Equal(t, []string{"user-b"}, reqs.Users)
	relations.RequireStatus(t, e.Call(t, "user-cp", "POST", "/social/requests/user-a/approve", nil), http.StatusOK, "")
	relations.RequireStatus(t, e.Call(t, "user-cp", "POST", "/social/requests/user-b/reject", nil), http.StatusOK, "")

	// Before the consumers run, the counts say what they have not applied.
	var counts rel.Counts
	r = e.Call(t, "user-a", "GET", "/social/users/user-cp/counts", nil)
	relations.RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &counts)
	require.EqualValues(t, 0, counts.Followers)
	require.EqualValues(t, 4, counts.Pending["followers"], "request a, request b, approve a, reject b")
	var views struct{ Views []rel.Lag }
	r = e.Do(t, e2etest.Req{Method: "GET", Path: "/social/views", Token: e.Token(t, "admin-0001", httpx.RoleAdmin)})
	relations.RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &views)
	var relViews int // rel's two; feed and like declare theirs too
	for _, v := range views.Views {
		if v.View != rel.FollowersView.Name && v.View != rel.FollowingView.Name {
			continue
		}
		relViews++
		require.EqualValues(t, 5, v.Events, v.View)
		require.EqualValues(t, 60, v.MaxLagSeconds)
		require.True(t, v.Within)
	}
	require.Equal(t, 2, relViews)

	e.CatchUp(t)
	r = e.Call(t, "user-a", "GET", "/social/users/user-cp/counts", nil)
	r.JSON(t, &counts)
	require.Equal(t, rel.Counts{UserID: "user-cp", Followers: 1, Following: 0, Pending: map[string]int64{"followers": 0, "following": 0}}, counts)
	var page rel.Page
	r = e.Call(t, "user-b", "GET", "/social/users/user-a/following", nil)
	relations.RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &page)
	require.Equal(t, []string{"user-b", "user-cp"}, relations.Sorted(page.Users))
	require.NotNil(t, page.Lag)
	require.Zero(t, page.Lag.Events)
	var me struct {
		User   rel.User
		Counts rel.Counts
	}
	r = e.Call(t, "user-a", "GET", "/social/me", nil)
	relations.RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &me)
	require.EqualValues(t, 2, me.Counts.Following)

	// An idempotent post: the retry returns the first one.
	hdr := map[string]string{"Idempotency-Key": "post-0001"}
	r1 := e.Do(t, e2etest.Req{Method: "POST", Path: "/social/posts", Token: e.UserToken(t, "user-cp"), Headers: hdr,
		Body: rel.PostRequest{Body: "once", Visibility: rel.Followers}})
	r2 := e.Do(t, e2etest.Req{Method: "POST", Path: "/social/posts", Token: e.UserToken(t, "user-cp"), Headers: hdr,
		Body: rel.PostRequest{Body: "once", Visibility: rel.Followers}})
	relations.RequireStatus(t, r1, http.StatusCreated, "")
	require.Equal(t, string(r1.Body), string(r2.Body))
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))

	// The timeline, paged three at a time while new posts arrive: every
	// post that existed when paging began is seen exactly once, in order.
	for i := range 10 {
		e.Post(t, "user-cp", []rel.Visibility{rel.Public, rel.Followers, rel.Self}[i%3])
	}
	var before []int64
	var all rel.PostPage
	r = e.Call(t, "user-a", "GET", "/social/users/user-cp/posts?limit=200", nil)
	r.JSON(t, &all)
	for _, p := range all.Posts {
		before = append(before, p.PostID)
	}
	require.Len(t, before, 8, "user-a (approved) reads PUBLIC and FOLLOWERS: 7 + the idempotent one")
	var seen []int64
	cursor := ""
	for {
		var pp rel.PostPage
		r := e.Call(t, "user-a", "GET", "/social/users/user-cp/posts?limit=3&cursor="+cursor, nil)
		relations.RequireStatus(t, r, http.StatusOK, "")
		r.JSON(t, &pp)
		for _, p := range pp.Posts {
			seen = append(seen, p.PostID)
		}
		e.Post(t, "user-cp", rel.Public) // newer than the first page: never on a later one
		if pp.Next == "" {
			break
		}
		cursor = pp.Next
	}
	require.Equal(t, before, seen)
	// user-b's request was rejected: PUBLIC only.
	r = e.Call(t, "user-b", "GET", "/social/users/user-cp/posts?limit=200", nil)
	r.JSON(t, &all)
	for _, p := range all.Posts {
		require.Equal(t, rel.Public, p.Visibility)
	}

	// A visibility change takes effect on the next read.
	var p rel.Post
	r1.JSON(t, &p)
	relations.RequireStatus(t, e.Read(t, "user-a", p.PostID), http.StatusOK, "")
	r = e.Call(t, "user-cp", "PATCH", fmt.Sprintf("/social/posts/%d", p.PostID), rel.VisibilityRequest{Visibility: rel.Self})
	relations.RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &p)
	require.EqualValues(t, 2, p.Version)
	relations.RequireStatus(t, e.Read(t, "user-a", p.PostID), http.StatusForbidden, "forbidden")
	var postEvents int
	require.NoError(t, e.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE topic = 'social.post' AND (payload->>'post_id')::bigint = $1`, p.PostID).Scan(&postEvents))
	require.Equal(t, 2, postEvents, "created, then changed")

	resp, err := e.Client.Get(e.URL + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, m := range []string{`fencelab_social_view_lag_events{view="followers"} 0`, `fencelab_social_view_max_lag_seconds{view="following"} 60`,
		`fencelab_social_relation_changes_total{op="approve"}`, `fencelab_social_access_checks_total{result="denied"}`} {
		require.Contains(t, string(body), m)
	}
	e.CatchUp(t)
	e2etest.Assert(t, e.Pool, "social")
}
