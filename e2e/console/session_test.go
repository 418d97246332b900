package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// client is a cookie-keeping HTTP client that does not follow redirects,
// so a test sees where the console sends it.
type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values, cookie *http.Cookie) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	cl := c.c
	if cookie != nil { // a captured cookie, sent by hand instead of the jar's
		cl = &http.Client{Timeout: c.c.Timeout, CheckRedirect: c.c.CheckRedirect}
		req.AddCookie(cookie)
	}
	resp, err := cl.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

var inputValue = func(name string) *regexp.Regexp {
	return regexp.MustCompile(`name="` + name + `" value="([^"]*)"`)
}

// signInHTTP signs in through the form as a browser would and returns the
// session cookie.
func (c *client) signIn(token string) *http.Cookie {
	c.t.Helper()
	status, page, _ := c.do(http.MethodGet, "/console/signin", nil, nil)
	require.Equal(c.t, http.StatusOK, status)
	m := inputValue("pre").FindStringSubmatch(page)
	require.NotNil(c.t, m, "the sign-in form carries its double-submit token")
	status, _, h := c.do(http.MethodPost, "/console/signin", url.Values{"pre": {m[1]}, "token": {token}, "next": {"/console/queue"}}, nil)
	require.Equal(c.t, http.StatusSeeOther, status)
	require.Equal(c.t, "/console/queue", h.Get("Location"))
	u, _ := url.Parse(c.base + "/")
	for _, ck := range c.c.Jar.Cookies(u) {
		if ck.Name == "fencelab_console" {
			return ck
		}
	}
	c.t.Fatal("no session cookie after sign-in")
	return nil
}

func TestSignOutRevokesTheConsoleSession(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	ctx := context.Background()
	tok := a.Token(t, admin, httpx.RoleAdmin)
	c := newClient(t, a.URL)
	old := c.signIn(tok)

	// The cookie is a session id, not the token: the token never leaves
	// the sign-in request.
	require.NotEqual(t, tok, old.Value)
	require.NotContains(t, old.Value, ".", "not a JWT")
	var sessions int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM console_session WHERE subject = $1 AND role = 'admin' AND expires_at > now()`, admin).Scan(&sessions))
	require.Equal(t, 1, sessions)

	status, page, _ := c.do(http.MethodGet, "/console", nil, old)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, admin, "the captured cookie opens the console while the session lives")
	status, _, _ = c.do(http.MethodGet, "/console/queue", nil, old)
	require.Equal(t, http.StatusOK, status)

	// Sign out (the form's CSRF token is on every signed-in page).
	m := inputValue("csrf").FindStringSubmatch(page)
	require.NotNil(t, m)
	status, _, h := c.do(http.MethodPost, "/console/signout", url.Values{"csrf": {m[1]}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.True(t, strings.HasPrefix(h.Get("Location"), "/console/signin"), h.Get("Location"))
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM console_session`).Scan(&sessions))
	require.Zero(t, sessions, "signing out deletes the session on the server")

	// The captured cookie, replayed, opens nothing: every page sends it to
	// sign-in, and an action is refused.
	for _, p := range []string{"/console", "/console/queue", "/console/chapters/points"} {
		status, _, h = c.do(http.MethodGet, p, nil, old)
		require.Equal(t, http.StatusSeeOther, status, p)
		require.True(t, strings.HasPrefix(h.Get("Location"), "/console/signin?"), "%s → %s", p, h.Get("Location"))
		require.Contains(t, h.Get("Location"), "session+ended", p)
	}
	status, _, _ = c.do(http.MethodPost, "/console/check", url.Values{"csrf": {m[1]}}, old)
	require.Equal(t, http.StatusUnauthorized, status)
}
