// Package console_test drives the web console in a real Chromium against
// the real deployable on real PostgreSQL: sign-in, live invariants, a lab
// run drawn as swimlanes, the review inbox, roles and CSRF.
package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/console"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

const admin, user = "admin-0001", "user-0042"

func start(t *testing.T) (*e2etest.App, *tab) {
	t.Helper()
	a := e2etest.Start(t, e2etest.Options{})
	return a, newTab(t, a.URL)
}

// startWorkflow starts a workflow run with business key key (tok is an
// admin's) and returns its job's id, for a test that then forces the
// job's state with SQL (no worker runs in these tests).
func startWorkflow(t *testing.T, a *e2etest.App, tok, key string) int64 {
	t.Helper()
	r := a.Do(t, e2etest.Req{Method: "POST", Path: "/workflows", Token: tok, Body: map[string]any{"business_key": key}})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	var started struct {
		JobID int64 `json:"job_id"`
	}
	r.JSON(t, &started)
	return started.JobID
}

func TestConsoleSignInAndOut(t *testing.T) {
	t.Parallel()
	a, b := start(t)

	// Signed out, the book reads (the chapter list, with a way to sign
	// in); an operator's page sends a person to the sign-in form.
	b.open("/")
	b.waitFor(`document.querySelector("#signin-link") && document.querySelector("table.chapters")`, 10*time.Second)
	b.open("/console/queue")
	b.waitFor(`location.pathname === "/console/signin"`, 10*time.Second)

	b.signIn(a.Token(t, admin, httpx.RoleAdmin))
	require.Contains(t, b.text("#who"), admin)
	ck := b.cookies()["fencelab_console"]
	require.NotNil(t, ck, "the session cookie is set")
	require.True(t, ck.HTTPOnly, "the session cookie is HttpOnly")
	require.Equal(t, "Strict", string(ck.SameSite))
	require.False(t, ck.Secure, "plain HTTP: Secure is set only when the console is served over TLS")
	require.False(t, eval[bool](b, `document.cookie.includes("fencelab_console=")`), "no script reads the token")

	b.submit("#signout", `location.pathname === "/console/signin" && document.querySelector("#msg")`, 10*time.Second)
	require.Contains(t, b.text("#msg"), "Signed out")
	require.Nil(t, b.cookies()["fencelab_console"], "signing out removes the cookie")
	b.open("/console/inbox")
	b.waitFor(`location.pathname === "/console/signin"`, 10*time.Second)

	// A token signed with another secret, and an expired one, are refused.
	other, err := httpx.NewAuth([]byte("not-the-servers-secret-0123456789"))
	require.NoError(t, err)
	forged, err := other.Mint(admin, httpx.RoleAdmin, time.Hour)
	require.NoError(t, err)
	// Signed with the server's secret, in the server's format, an hour past
	// its expiry.
	expired, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iss": "fencelab", "sub": admin, "role": "admin",
		"iat": time.Now().Add(-2 * time.Hour).Unix(), "exp": time.Now().Add(-time.Hour).Unix(),
	}).SignedString([]byte(e2etest.Secret))
	require.NoError(t, err)
	for name, tok := range map[string]string{"forged": forged, "expired": expired, "garbage": "not-a-token"} {
		b.open("/console/signin")
		b.fill("#token", tok)
		b.submit("#signin", `document.querySelector("#error")`, 10*time.Second)
		require.Contains(t, b.text("#error"), "refused", name)
		if name == "expired" {
			require.Contains(t, b.text("#error"), "expired")
		}
		require.Nil(t, b.cookies()["fencelab_console"], "%s token: no session", name)
	}
}

func TestConsoleShowsEveryInvariantGreenOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	a, b := start(t)
	b.signIn(a.Token(t, user, httpx.RoleUser))
	b.submit("#check-now", `location.pathname === "/" && document.querySelector("#checked") && document.querySelector("#checked").textContent.startsWith("Checked")`, time.Minute)

	statuses := eval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll("a.inv[data-invariant]")].map(e => [e.dataset.invariant, e.dataset.status]))`)
	registered := e2etest.Invariants().All()
	require.NotEmpty(t, registered)
	require.Len(t, statuses, len(registered), "the index lists every registered invariant once")
	for _, inv := range registered {
		require.Equal(t, "green", statuses[inv.ID], "%s on a fresh database", inv.ID)
	}
	require.Contains(t, b.text("#red-count"), "Every invariant holds")
	// Every chapter of the book is listed, in the book's order.
	order := eval[[]string](b, `[...document.querySelectorAll("table.chapters tbody tr")].map(r => r.id)`)
	require.GreaterOrEqual(t, len(order), 14)
	require.Equal(t, "chapter-lease", order[0])
	require.Equal(t, "chapter-points", order[4])
	require.Equal(t, "chapter-failover", order[13])
}

func TestConsoleShowsACorruptedBalanceRed(t *testing.T) {
	t.Parallel()
	a, b := start(t)
	tok := a.Token(t, admin, httpx.RoleAdmin)
	const account = "acct-0777"
	r := a.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts", Token: tok,
		Body: map[string]any{"id": account, "owner": user}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = a.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts/" + account + "/grants", Token: tok,
		Body: map[string]any{"amount": 100, "reason": "opening"}, Headers: map[string]string{"Idempotency-Key": "open-0777"}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

	b.signIn(a.Token(t, user, httpx.RoleUser))
	b.open("/console/chapters/points")
	b.submit("#check-now", `document.querySelector("#PTS-I4") && document.querySelector("#PTS-I4").dataset.status === "green"`, time.Minute)

	// The corruption: the stored balance no longer equals its entries.
	_, err := a.Pool.Exec(context.Background(), `UPDATE points_account SET balance = balance + 7 WHERE id = $1`, account)
	require.NoError(t, err)

	b.submit("#check-now", `location.pathname === "/console/chapters/points" && document.querySelector("#PTS-I4").dataset.status === "red"`, time.Minute)
	b.waitFor(`document.querySelector("#PTS-I4 table.rows") && document.querySelector("#PTS-I4 table.rows").textContent.includes("`+account+`")`, 10*time.Second)
	rows := b.text("#PTS-I4 table.rows")
	require.Contains(t, rows, account, "PTS-I4 shows the offending account's row")
	require.Contains(t, rows, "107")
	// The index marks the chapter red too.
	b.open("/")
	require.Equal(t, "red", eval[string](b, `document.querySelector('#chapter-points a.inv[data-invariant="PTS-I4"]').dataset.status`))
	require.Equal(t, "green", eval[string](b, `document.querySelector('#chapter-points a.inv[data-invariant="PTS-I1"]').dataset.status`))
}

func TestConsoleRunsAnExperimentAndDrawsItsTimeline(t *testing.T) {
	t.Parallel()
	a, b := start(t)
	b.signIn(a.Token(t, admin, httpx.RoleAdmin))
	b.open("/console/chapters/points")
	b.submit(`button.run[data-experiment="points/concurrent-debits"]`, `location.pathname.startsWith("/console/runs/")`, 30*time.Second)
	// The page refreshes itself until both versions have run (a scratch
	// PostgreSQL is provisioned on the first run).
	b.waitFor(`document.querySelector("#run-state") && document.querySelector("#run-state").dataset.state === "done"`, 4*time.Minute)

	require.Contains(t, b.text("#guarded-verdict"), "Holds", b.text("main"))
	require.Contains(t, b.text("#naive-verdict"), "Caught", b.text("main"))
	require.Contains(t, b.text("#naive-verdict"), "PTS-I1")
	// The control (the same naive code, one client) is drawn beside the
	// naive run, and holds.
	require.Contains(t, b.text("#control-verdict"), "Holds", b.text("main"))
	require.Equal(t, "holds", eval[string](b, `document.querySelector("#control-verdict").dataset.verdict`))
	require.Positive(t, eval[int](b, `document.querySelectorAll("#control .swimlane svg.step[data-outcome]").length`))
	require.Zero(t, eval[int](b, `document.querySelectorAll('#control .swimlane svg.step[data-outcome="violates"]').length`))
	for _, v := range []string{"guarded", "naive"} {
		lanes := eval[int](b, fmt.Sprintf(`document.querySelectorAll("#%s .swimlane .lanes .lane").length`, v))
		steps := eval[int](b, fmt.Sprintf(`document.querySelectorAll("#%s .swimlane svg.step[data-outcome]").length`, v))
		require.Greater(t, lanes, 100, "%s: one lane per actor, every one of the 100 debitors drawn", v)
		require.Equal(t, eval[int](b, fmt.Sprintf(`+document.querySelector("#%s .swimlane").dataset.actors`, v)), lanes, v)
		require.Greater(t, steps, 100, "%s: a marker per step", v)
		// The last lane is reachable: its group opens with one click.
		// (A pixel of slack: a lane's top may sit at a fraction of a pixel
		// that scrolling, in whole pixels, cannot bring exactly to 0.)
		b.click(fmt.Sprintf("#%s .more-lanes summary", v))
		require.True(t, eval[bool](b, fmt.Sprintf(`(() => { const l = [...document.querySelectorAll("#%s .swimlane .lanes .lane")].pop(); l.scrollIntoView({block: "center"}); const r = l.getBoundingClientRect(); return r.height > 0 && r.top >= -1 && r.bottom <= innerHeight + 1 })()`, v)),
			"%s: the last lane is on screen: %s", v, eval[string](b, fmt.Sprintf(`(() => { const l = [...document.querySelectorAll("#%s .swimlane .lanes .lane")].pop(); return JSON.stringify(l.getBoundingClientRect()) + " innerHeight " + innerHeight })()`, v)))
	}
	// Guarded: 33 accepted, 67 refused, nothing violating. Naive: the
	// unguarded subtractions are drawn as violations and PTS-I1's rows shown.
	require.Equal(t, 67, eval[int](b, `document.querySelectorAll('#guarded .swimlane svg.step[data-outcome="refused"]').length`))
	require.Zero(t, eval[int](b, `document.querySelectorAll('#guarded .swimlane svg.step[data-outcome="violates"]').length`))
	require.Greater(t, eval[int](b, `document.querySelectorAll('#naive .swimlane svg.step[data-outcome="violates"]').length`), 33)
	require.Contains(t, b.text(`#naive div.invariant[data-invariant="PTS-I1"]`), "acct-0042")

	if p := os.Getenv("FENCELAB_CONSOLE_SCREENSHOT"); p != "" {
		b.screenshot(p)
	}
}

func TestConsoleReviewInboxDecidesAJob(t *testing.T) {
	t.Parallel()
	a, b := start(t)
	tok := a.Token(t, admin, httpx.RoleAdmin)
	jobID := startWorkflow(t, a, tok, "wf-review-1")
	// The timeline a person is needed for, forced with SQL (no worker
	// runs here): claimed at fence 1, the outcome could not be
	// established, needs_review.
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, `
WITH j AS (UPDATE job SET state = 'needs_review', attempts = 1, fence = 1, owner = NULL, lease_until = NULL,
                          last_error = 'the tool neither answered nor can be asked', updated_at = now()
            WHERE id = $1 RETURNING id)
INSERT INTO job_event (job_id, event, fence, owner, state, detail)
SELECT id, e.event, 1, e.owner, e.state, e.detail FROM j,
  (VALUES ('claimed', 'worker-1', 'running', NULL), ('needs_review', 'resolver', 'needs_review', 'cannot ask the tool')) AS e(event, owner, state, detail)`, jobID)
	require.NoError(t, err)

	b.signIn(tok)
	// The queue shows it waiting for a person, in its kind's row.
	b.open("/console/queue")
	require.Equal(t, 1, eval[int](b, `(() => { const r = [...document.querySelectorAll("#depth tbody tr")].find(r => r.dataset.kind === "workflow"); return r ? +r.children[4].textContent : -1 })()`))
	require.Contains(t, b.text("main"), fmt.Sprint(jobID))

	b.open("/console/inbox")
	sel := fmt.Sprintf("#job-%d", jobID)
	b.waitFor(fmt.Sprintf(`document.querySelector(%q)`, sel), 10*time.Second)

	// A decision without a reason is not sent (and not accepted).
	b.click(sel + " button.decide")
	require.Equal(t, "/console/inbox", b.path(), "the browser holds back a form without its required reason")

	b.open("/console/inbox")
	_ = eval[bool](b, fmt.Sprintf(`(document.querySelector(%q).value = "failed", true)`, sel+` select[name="decision"]`))
	b.fill(sel+` input[name="reason"]`, "checked the tool's log: the call never arrived")
	b.submit(sel+" button.decide", `document.querySelector("#done")`, 30*time.Second)
	require.Contains(t, b.text("#done"), fmt.Sprintf("Job %d decided failed by %s", jobID, admin))
	require.False(t, eval[bool](b, fmt.Sprintf(`!!document.querySelector(%q)`, sel)), "the job left the inbox")

	// Recorded with who and why, as the API records it.
	var state, owner, detail string
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT j.state, e.owner, e.detail FROM job_all j JOIN job_event e ON e.job_id = j.id
	  WHERE j.id = $1 ORDER BY e.id DESC LIMIT 1`, jobID).Scan(&state, &owner, &detail))
	require.Equal(t, "failed", state)
	require.Equal(t, "review:"+admin, owner)
	require.Contains(t, detail, "checked the tool's log: the call never arrived")
	e2etest.Assert(t, a.Pool, "claim")

	// The job page shows the history with its fences.
	b.open(fmt.Sprintf("/console/jobs/%d", jobID))
	require.Equal(t, "failed", b.text("#job-state"))
	require.Contains(t, b.text("#events"), "review:"+admin)
}

func TestConsoleUserCannotReachAdminPages(t *testing.T) {
	t.Parallel()
	a, b := start(t)
	b.signIn(a.Token(t, user, httpx.RoleUser))
	require.Zero(t, eval[int](b, `document.querySelectorAll('header nav a[href="/console/queue"], header nav a[href="/console/inbox"]').length`),
		"a user is not shown the operator's pages")
	for _, p := range console.AdminPages {
		b.open(p)
		require.Contains(t, b.text("h1"), "403", p)
	}
	// A user's Run buttons lead to signing in as admin; none starts a run.
	b.open("/console/chapters/points")
	require.Zero(t, eval[int](b, `document.querySelectorAll('form[action="/console/experiments/run"]').length`))
	require.Positive(t, eval[int](b, `document.querySelectorAll('form[action="/console/signin"] button.run').length`))

	// The actions, posted with the user's own valid session and CSRF token:
	// refused for the role, not for the form.
	csrf := eval[string](b, `document.querySelector('input[name="csrf"]').value`)
	session := b.cookies()["fencelab_console"].Value
	for _, p := range console.AdminActions {
		status, body := post(t, a.URL, p, session, url.Values{"csrf": {csrf}, "reason": {"because"}, "experiment": {"points/concurrent-debits"},
			"decision": {"failed"}, "action": {"give_up"}}, nil)
		require.Equal(t, http.StatusForbidden, status, "%s: %s", p, body)
		require.Contains(t, body, "Admins only", p)
	}
}

func TestConsoleFormsNeedCSRF(t *testing.T) {
	t.Parallel()
	a, b := start(t)
	b.signIn(a.Token(t, admin, httpx.RoleAdmin))
	csrf := eval[string](b, `document.querySelector('input[name="csrf"]').value`)
	session := b.cookies()["fencelab_console"].Value

	// A page on another origin posts the sign-out form to the console:
	// the browser does not send the SameSite=Strict cookie, and the
	// console refuses the request; the session survives.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form id="f" method="post" action="%s/console/signout"><input name="csrf" value="guess"></form><script>document.getElementById("f").submit()</script>`, a.URL)
	}))
	defer evil.Close()
	b.open("")
	if err := runNavigate(b, strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)); err != nil {
		t.Fatalf("open the other site: %v", err)
	}
	b.waitFor(`location.pathname === "/console/signout"`, 10*time.Second)
	require.Contains(t, b.text("h1"), "401")
	require.NotNil(t, b.cookies()["fencelab_console"], "the cross-site post did not sign the person out")
	b.open("/")
	require.Contains(t, b.text("#who"), admin)

	// The same checks against a client that does carry the cookie: every
	// state-changing form needs the session's CSRF token and this origin.
	form := url.Values{"csrf": {csrf}, "back": {"/"}}
	status, body := post(t, a.URL, "/console/check", session, url.Values{"back": {"/"}}, nil)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, "CSRF token")
	status, _ = post(t, a.URL, "/console/check", session, url.Values{"csrf": {"forged"}, "back": {"/"}}, nil)
	require.Equal(t, http.StatusForbidden, status)
	status, body = post(t, a.URL, "/console/check", session, form, map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "evil.example")
	status, _ = post(t, a.URL, "/console/check", session, form, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, status)
	status, _ = post(t, a.URL, "/console/inbox/orders/reconcile", session, url.Values{"reason": {"x"}}, nil)
	require.Equal(t, http.StatusForbidden, status)
	// A sign-in form not served by this console is refused too (login CSRF).
	status, _ = post(t, a.URL, "/console/signin", "", url.Values{"token": {a.Token(t, admin, httpx.RoleAdmin)}}, nil)
	require.Equal(t, http.StatusForbidden, status)
	// With the token and this origin, the same form is accepted.
	status, _ = post(t, a.URL, "/console/check", session, form, map[string]string{"Origin": a.URL, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusSeeOther, status)
}

// post sends a form with the session cookie and returns the status and body
// (redirects are not followed).
func post(t *testing.T, base, path, session string, form url.Values, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if session != "" {
		req.AddCookie(&http.Cookie{Name: "fencelab_console", Value: session})
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, stripTags(string(b))
}

var tags = regexp.MustCompile(`<[^>]*>`)

func stripTags(s string) string { return tags.ReplaceAllString(s, " ") }

func runNavigate(b *tab, u string) error {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	return navigate(ctx, u)
}
