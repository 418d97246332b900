package feed_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// TestFEEDBadInputIsA4xx: the reader is the token's subject; a cursor is
// only good for the reader, strategy and deployment it was issued to —
// tampered, truncated, another reader's, another strategy's or another
// deployment's is a 400 invalid_cursor; limit outside 1..100 or not an
// integer is a 400 invalid_limit; an unknown strategy a 400; push for a
// reader following a pulled author a 409; no token a 401. None of them is
// a 500, and no page is served on any of them.
func TestFEEDBadInputIsA4xx(t *testing.T) {
	t.Parallel()
	e := setup(t, "hybrid", 2)
	e.users(t, "user-r", "user-s", "user-a", "user-b")
	for _, f := range [][2]string{{"user-r", "user-a"}, {"user-s", "user-a"}, {"user-s", "user-b"}} {
		e.do(t, rel.OpFollow, f[0], f[1])
	}
	for range 5 {
		e.post(t, "user-a", rel.Public) // user-a has 2 followers: pulled
		e.post(t, "user-b", rel.Public)
	}
	e.catchUp(t)

	get := func(sub string, q url.Values) e2etest.Response {
		return e.a.Do(t, e2etest.Req{Method: "GET", Path: "/social/feed?" + q.Encode(), Token: e.token(t, sub)})
	}
	getBad := func(sub string, q url.Values) e2etest.Response { // bad input on purpose: only the response is checked
		return e.a.Do(t, e2etest.Req{Method: "GET", Path: "/social/feed?" + q.Encode(), Token: e.token(t, sub), Invalid: true})
	}
	first := e.page(t, "user-s", "pull", "", 3)
	require.Len(t, first.Posts, 3)
	require.NotEmpty(t, first.Next)
	// Without strategy=, the cursor's strategy goes on.
	second := e.page(t, "user-s", "", first.Next, 3)
	require.Equal(t, "pull", second.Strategy)

	raw, err := base64.RawURLEncoding.DecodeString(first.Next)
	require.NoError(t, err)
	flip := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(b)
	}
	// Another deployment (another token secret) on the same data.
	other := e2etest.Start(t, e2etest.Options{DBURL: e.a.DBURL, TokenSecret: "another-deployment-secret-0123"})
	foreign := other.Do(t, e2etest.Req{Method: "GET", Path: "/social/feed?limit=1&strategy=pull", Token: other.Token(t, "user-s", "user")})
	require.Equal(t, http.StatusOK, foreign.Status, "%s", foreign.Body)

	for name, c := range map[string]struct {
		sub  string
		q    url.Values
		code string
	}{
		"tampered position":          {"user-s", url.Values{"cursor": {flip(10)}}, "invalid_cursor"},
		"tampered watermark":         {"user-s", url.Values{"cursor": {flip(40)}}, "invalid_cursor"},
		"tampered mac":               {"user-s", url.Values{"cursor": {flip(len(raw) - 1)}}, "invalid_cursor"},
		"truncated":                  {"user-s", url.Values{"cursor": {first.Next[:len(first.Next)-2]}}, "invalid_cursor"},
		"garbage":                    {"user-s", url.Values{"cursor": {"not-a-cursor"}}, "invalid_cursor"},
		"huge":                       {"user-s", url.Values{"cursor": {strings.Repeat("A", 4000)}}, "invalid_cursor"},
		"another reader's":           {"user-r", url.Values{"cursor": {first.Next}, "strategy": {"pull"}}, "invalid_cursor"},
		"another strategy's":         {"user-s", url.Values{"cursor": {first.Next}, "strategy": {"hybrid"}}, "invalid_cursor"},
		"another deployment's":       {"user-s", url.Values{"cursor": {mustNext(t, foreign)}}, "invalid_cursor"},
		"limit 0":                    {"user-s", url.Values{"limit": {"0"}}, "invalid_limit"},
		"limit 101":                  {"user-s", url.Values{"limit": {"101"}}, "invalid_limit"},
		"limit -1":                   {"user-s", url.Values{"limit": {"-1"}}, "invalid_limit"},
		"limit 1.5":                  {"user-s", url.Values{"limit": {"1.5"}}, "invalid_limit"},
		"limit abc":                  {"user-s", url.Values{"limit": {"abc"}}, "invalid_limit"},
		"limit huge":                 {"user-s", url.Values{"limit": {"99999999999999999999"}}, "invalid_limit"},
		"unknown strategy":           {"user-s", url.Values{"strategy": {"fanout"}}, "invalid_strategy"},
		"push for a pulled follower": {"user-r", url.Values{"strategy": {"push"}}, "strategy_unavailable"},
	} {
		r := getBad(c.sub, c.q)
		status := http.StatusBadRequest
		if c.code == "strategy_unavailable" {
			status = http.StatusConflict
		}
		require.Equal(t, status, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, c.code, r.Code(), "%s: %s", name, r.Body)
		require.NotContains(t, string(r.Body), `"posts"`, name)
	}
	// user-s follows user-b too, whose posts are pushed: push refuses
	// user-s as well (user-a is pulled); a reader following only pushed
	// authors is served.
	requireProblem(t, get("user-s", url.Values{"strategy": {"push"}}), http.StatusConflict, "strategy_unavailable")
	e.users(t, "user-t")
	e.do(t, rel.OpFollow, "user-t", "user-b")
	e.catchUp(t)
	pages, code := e.scroll(t, "user-t", "push", 2)
	require.Empty(t, code)
	require.Len(t, ids(pages), 5)

	r := e.a.Do(t, e2etest.Req{Method: "GET", Path: "/social/feed"})
	requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
	r = e.a.Do(t, e2etest.Req{Method: "GET", Path: "/social/feed", Token: e.a.Token(t, "user-s", "admin")})
	require.Equal(t, http.StatusForbidden, r.Status)
	e2etest.Assert(t, e.a.Pool, "social")
}

func mustNext(t *testing.T, r e2etest.Response) string {
	t.Helper()
	var p feed.Page
	r.JSON(t, &p)
	require.NotEmpty(t, p.Next, "the other deployment's page has no next cursor: %s", r.Body)
	return p.Next
}
