package like_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	likeslab "github.com/fencelab/fencelab/lab/likes"
	"github.com/fencelab/fencelab/services/social/like"
	"github.com/fencelab/fencelab/services/social/rel"
)

func post(t *testing.T, a *likeslab.Lab, path, token string) e2etest.Response {
	t.Helper()
	return a.Do(t, e2etest.Req{Method: http.MethodPost, Path: path, Token: token})
}

func get(t *testing.T, a *likeslab.Lab, path, token string) e2etest.Response {
	t.Helper()
	return a.Do(t, e2etest.Req{Method: http.MethodGet, Path: path, Token: token})
}

func fact(t *testing.T, r e2etest.Response) like.Fact {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var f like.Fact
	r.JSON(t, &f)
	return f
}

func likes(t *testing.T, a *likeslab.Lab, item int64, token string) like.Likes {
	t.Helper()
	r := get(t, a, fmt.Sprintf("/social/items/%d/likes", item), token)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var l like.Likes
	r.JSON(t, &l)
	return l
}

// TestLikeAPIClicksAndTheCount: the API as a client sees it. A repeated
// click changes nothing; the count lags the facts by exactly the pending
// events it reports until the counter runs, then is exact.
func TestLikeAPIClicksAndTheCount(t *testing.T) {
	a := e2etest.StartLab(t, likeslab.StartLab, lab.Options{})
	item := a.Items(t, 1)[0]
	u1, u2 := a.Token(t, "user-0001", httpx.RoleUser), a.Token(t, "user-0002", httpx.RoleUser)
	path := func(op string) string { return fmt.Sprintf("/social/items/%d/%s", item, op) }

	f := fact(t, post(t, a, path("like"), u1))
	require.Equal(t, like.Fact{ItemID: item, UserID: "user-0001", Liked: true, Version: 1, UpdatedAt: f.UpdatedAt, Changed: true}, f)
	f = fact(t, post(t, a, path("like"), u1))
	require.Equal(t, like.Fact{ItemID: item, UserID: "user-0001", Liked: true, Version: 1, UpdatedAt: f.UpdatedAt}, f, "a repeated click changes nothing")
	require.True(t, fact(t, post(t, a, path("like"), u2)).Changed)
	f = fact(t, post(t, a, path("unlike"), u2))
	require.Equal(t, int64(2), f.Version)
	require.False(t, f.Liked)
	require.False(t, fact(t, post(t, a, path("unlike"), u2)).Changed)
	f = fact(t, post(t, a, path("unlike"), a.Token(t, "user-0003", httpx.RoleUser)))
	require.Equal(t, like.Fact{ItemID: item, UserID: "user-0003"}, f, "never liked: nothing to withdraw")

	// Three changes, none counted yet: truth is 1, the count 0, off by 1 <= 3.
	l := likes(t, a, item, u1)
	require.Equal(t, int64(0), l.Count)
	require.Equal(t, int64(3), l.PendingEvents)
	require.Equal(t, int64(3), l.ErrorBound)
	require.True(t, l.Liked)
	require.GreaterOrEqual(t, l.LagSeconds, 0.0)
	e2etest.Assert(t, a.Pool, likeslab.LabInvariants...)

	a.CatchUp(t)
	require.Equal(t, like.Likes{ItemID: item, Count: 1}, likes(t, a, item, u2))

	// A recompute of one item finds it right.
	admin := a.Token(t, "admin-1", httpx.RoleAdmin)
	rc := a.Recompute(t, admin, fmt.Sprintf("?item=%d", item))
	require.Equal(t, like.Recount{Items: 1, Chunks: 1, Corrected: []like.Correction{}}, rc)
	e2etest.Assert(t, a.Pool, likeslab.LabInvariants...)
}

// TestLikeAPIRefusesBadInput: every client mistake is a 4xx problem.
func TestLikeAPIRefusesBadInput(t *testing.T) {
	a := e2etest.StartLab(t, likeslab.StartLab, lab.Options{})
	item := a.Items(t, 1)[0]
	user := a.Token(t, "user-0001", httpx.RoleUser)
	admin := a.Token(t, "admin-1", httpx.RoleAdmin)
	other, err := httpx.NewAuth([]byte("another-secret-0123456789"))
	require.NoError(t, err)
	forged, err := other.Mint("user-0001", httpx.RoleUser, time.Hour)
	require.NoError(t, err)

	for _, c := range []struct {
		name, method, path, token string
		body                      any
		status                    int
		code                      string
	}{
		{"no token", "POST", fmt.Sprintf("/social/items/%d/like", item), "", nil, 401, "unauthorized"},
		{"forged token", "POST", fmt.Sprintf("/social/items/%d/like", item), forged, nil, 401, "unauthorized"},
		{"no token on the count", "GET", fmt.Sprintf("/social/items/%d/likes", item), "", nil, 401, "unauthorized"},
		{"an admin is not a liker", "POST", fmt.Sprintf("/social/items/%d/like", item), admin, nil, 403, "forbidden"},
		{"a user may not recompute", "POST", "/social/admin/likes/recompute", user, nil, 403, "forbidden"},
		{"item not a number", "POST", "/social/items/abc/like", user, nil, 400, "invalid_id"},
		{"item zero", "POST", "/social/items/0/unlike", user, nil, 400, "invalid_id"},
		{"item negative", "GET", "/social/items/-4/likes", user, nil, 400, "invalid_id"},
		{"item too large", "GET", "/social/items/99999999999999999999/likes", user, nil, 400, "invalid_id"},
		{"unknown item: like", "POST", "/social/items/987654/like", user, nil, 404, "item_not_found"},
		{"unknown item: unlike", "POST", "/social/items/987654/unlike", user, nil, 404, "item_not_found"},
		{"unknown item: count", "GET", "/social/items/987654/likes", user, nil, 404, "item_not_found"},
		{"unknown item: recompute", "POST", "/social/admin/likes/recompute?item=987654", admin, nil, 404, "item_not_found"},
		{"bad item: recompute", "POST", "/social/admin/likes/recompute?item=x", admin, nil, 400, "invalid_item_id"},
		{"acting for someone else", "POST", fmt.Sprintf("/social/items/%d/like", item), user,
			map[string]string{"user_id": "user-0002"}, 400, ""},
		{"not JSON", "POST", fmt.Sprintf("/social/items/%d/like", item), user, "like!", 400, ""},
		// An admin route refuses any body, an empty object too (httpx.NoBody).
		{"a body on recompute", "POST", "/social/admin/likes/recompute", admin, map[string]string{}, 400, "body_not_allowed"},
	} {
		r := a.Do(t, e2etest.Req{Method: c.method, Path: c.path, Token: c.token, Body: c.body, Invalid: true})
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), c.name)
		if c.code != "" {
			require.Equal(t, c.code, r.Code(), "%s: %s", c.name, r.Body)
		}
	}
	var facts int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM social_like`).Scan(&facts))
	require.Zero(t, facts, "no refused request wrote a fact")
	e2etest.Assert(t, a.Pool, likeslab.LabInvariants...)
}

// TestLikeNeedsAccessCheck: liking, or reading the count of, a post you
// may not read is refused (rel's AccessCheck, on the truth table);
// withdrawing a like never is, so a block cannot trap one.
func TestLikeNeedsAccessCheck(t *testing.T) {
	a := e2etest.StartLab(t, likeslab.StartLab, lab.Options{})
	svc, err := rel.NewService(app.Standalone(a.Pool))
	require.NoError(t, err)
	ctx := context.Background()
	self, err := svc.CreatePost(ctx, likeslab.LabAuthor, rel.PostRequest{Body: "mine only", Visibility: rel.Self})
	require.NoError(t, err)
	public := a.Items(t, 1)[0]
	fan := a.Token(t, "user-0007", httpx.RoleUser)

	r := post(t, a, fmt.Sprintf("/social/items/%d/like", self.PostID), fan)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	r = get(t, a, fmt.Sprintf("/social/items/%d/likes", self.PostID), fan)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.True(t, fact(t, post(t, a, fmt.Sprintf("/social/items/%d/like", self.PostID), a.Token(t, likeslab.LabAuthor, httpx.RoleUser))).Changed,
		"the author reads and likes a SELF post")

	require.True(t, fact(t, post(t, a, fmt.Sprintf("/social/items/%d/like", public), fan)).Changed)
	_, err = svc.Do(ctx, rel.OpBlock, likeslab.LabAuthor, "user-0007")
	require.NoError(t, err)
	r = post(t, a, fmt.Sprintf("/social/items/%d/like", public), fan)
	require.Equal(t, http.StatusForbidden, r.Status, "a block hides the post: %s", r.Body)
	f := fact(t, post(t, a, fmt.Sprintf("/social/items/%d/unlike", public), fan))
	require.True(t, f.Changed, "the like can still be withdrawn")
	a.CatchUp(t)
	e2etest.Assert(t, a.Pool, likeslab.LabInvariants...)
}

// TestLIKEInvariantsCatchEachCorruption: each corruption, written behind
// the service's back in a transaction rolled back afterwards, makes its
// invariant report rows. A check that cannot fail would prove nothing.
func TestLIKEInvariantsCatchEachCorruption(t *testing.T) {
	a := e2etest.StartLab(t, likeslab.StartLab, lab.Options{})
	ids := a.Items(t, 2)
	svc, err := like.NewService(app.Standalone(a.Pool), like.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	for _, u := range []string{"user-0001", "user-0002"} {
		_, err := svc.Like(ctx, u, ids[0])
		require.NoError(t, err)
	}
	_, err = svc.Unlike(ctx, "user-0002", ids[0])
	require.NoError(t, err)
	a.CatchUp(t)
	e2etest.Assert(t, a.Pool, likeslab.LabInvariants...)
	item := fmt.Sprint(ids[0])

	e2etest.RequireCaught(t, a.Pool, []e2etest.Corruption{
		{ID: "LIKE-S1", Name: "the guard disabled", SQL: []string{`ALTER TABLE social_like DISABLE TRIGGER social_like_guard`}},
		{ID: "LIKE-I1", Name: "liked out of step with the version", SQL: []string{
			`ALTER TABLE social_like DROP CONSTRAINT social_like_versioned`,
			`ALTER TABLE social_like DISABLE TRIGGER social_like_guard`,
			`UPDATE social_like SET liked = false WHERE user_id = 'user-0001'`}},
		{ID: "LIKE-I2", Name: "a change without its event", SQL: []string{
			`ALTER TABLE social_like DISABLE TRIGGER social_like_guard`,
			`UPDATE social_like SET liked = NOT liked, version = version + 1, changed_tx = pg_current_xact_id() WHERE user_id = 'user-0001'`}},
		{ID: "LIKE-I2", Name: "an event without a change", SQL: []string{
			`INSERT INTO outbox_event (topic, key, payload) VALUES ('social.like', '` + item + `',
			  '{"item_id":` + item + `,"user_id":"user-0001","liked":false,"version":2}')`}},
		{ID: "LIKE-I2", Name: "two events for one version", SQL: []string{
			`INSERT INTO outbox_event (topic, key, payload) VALUES ('social.like', '` + item + `',
			  '{"item_id":` + item + `,"user_id":"user-0002","liked":true,"version":1}')`}},
		{ID: "LIKE-I3", Name: "a caught-up count off the facts", SQL: []string{
			`UPDATE social_like_count SET n = n + 1`}},
		{ID: "LIKE-I4", Name: "a count beyond its bound", SQL: []string{
			`UPDATE social_like_count SET n = n + 5`,
			`INSERT INTO social_like (item_id, user_id) VALUES (` + item + `, 'user-0003')`,
			`INSERT INTO outbox_event (topic, key, payload) VALUES ('social.like', '` + item + `',
			  '{"item_id":` + item + `,"user_id":"user-0003","liked":true,"version":1}')`}},
	})
	e2etest.Assert(t, a.Pool, likeslab.LabInvariants...)
}

// TestLikeFactsAreNeverDeletedAndEveryUpdateIsOneFlip: the guard trigger
// and the CHECK are LIKE-I1's first line, under the service's conditional
// statements.
func TestLikeFactsAreNeverDeletedAndEveryUpdateIsOneFlip(t *testing.T) {
	a := e2etest.StartLab(t, likeslab.StartLab, lab.Options{})
	item := a.Items(t, 1)[0]
	svc, err := like.NewService(app.Standalone(a.Pool), like.Config{})
	require.NoError(t, err)
	_, err = svc.Like(context.Background(), "user-0001", item)
	require.NoError(t, err)
	ctx := context.Background()
	for _, sql := range []string{
		`DELETE FROM social_like`,
		`UPDATE social_like SET version = version + 2, liked = true`,
		`UPDATE social_like SET version = version + 1, liked = true`,
		`UPDATE social_like SET liked = false`,
		`UPDATE social_like SET user_id = 'user-0002', version = version + 1, liked = false`,
		`INSERT INTO social_like (item_id, user_id, liked, version) VALUES (` + fmt.Sprint(item) + `, 'user-0009', false, 1)`,
		`INSERT INTO social_like (item_id, user_id) VALUES (` + fmt.Sprint(item) + `, 'user-0001')`,
	} {
		err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, sql); return err })
		require.Error(t, err, sql)
	}
	e2etest.Assert(t, a.Pool, "LIKE-I1", "LIKE-I2")
}
