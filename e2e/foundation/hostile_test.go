package foundation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// hostileBodies are what an outside probe sends to every route that takes
// a body: text PostgreSQL cannot store, duplicate and case-variant keys,
// wrong types, an oversized document, and not-JSON.
var hostileBodies = map[string]string{
	"nul":             `{"reason":"a\u0000b","name":"a\u0000b","target":"https://x.example/\u0000","data":{"k\u0000":"v"}}`,
	"lone surrogate":  `{"reason":"\ud800","name":"\udc00","target":"https://x.example/\ud800","data":{"k":"\ud800"}}`,
	"nul in a key":    `{"a\u0000":1}`,
	"duplicate keys":  `{"amount":1,"amount":500,"amount":2}`,
	"case-variant":    `{"Amount":1,"AMOUNT":500}`,
	"wrong type":      `{"amount":"five","reason":7,"channels":"all","reservation_id":"x","total_size":"big"}`,
	"array":           `[1,2,3]`,
	"scalar":          `"text"`,
	"truncated":       `{"amount":`,
	"trailing":        `{}{}`,
	"invalid utf-8":   "{\"reason\":\"\xff\xfe\"}",
	"oversize":        `{"reason":"` + strings.Repeat("x", 2<<20) + `"}`,
	"deep nesting":    strings.Repeat(`{"a":`, 2000) + `1` + strings.Repeat(`}`, 2000),
	"number overflow": `{"amount":1e400,"reservation_id":99999999999999999999999}`,
	// Issue 36: nesting 10, 1,000 and 100,000 levels deep (200 KB, the
	// probe that took gigabytes and no answer), in a field every route
	// would read as data. A route that takes no body says so first.
	"nesting 10":     nestedBody(10),
	"nesting 1000":   nestedBody(1000),
	"nesting 100000": nestedBody(100_000),
}

// nestedBody is a JSON object whose "body" member nests arrays until the
// document is depth levels deep.
func nestedBody(depth int) string {
	return `{"body":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

// tooDeep names the hostile bodies nested past httpx.MaxJSONDepth: a route
// that reads them answers 400 body_too_deep (auth, a signature or the path
// may refuse them first, with their own 4xx).
var tooDeep = map[string]bool{"deep nesting": true, "nesting 1000": true, "nesting 100000": true}

// hostilePaths replace every path parameter, and hostileQueries are added
// to every route.
var (
	// Malformed for every kind of id (numbers, UUIDs, user ids, codes, dates).
	hostilePaths   = []string{"x%00y", "%ED%A0%80", "%FF", strings.Repeat("9", 200), "..%2F..%2Fetc", "-1", "%20"}
	hostileQueries = []string{"limit=%00", "cursor=%ED%A0%80", "item=x%00", "q=%FF"}
	// wrongQueries are refused by the routes that read these parameters
	// and ignored by the others: never a 5xx.
	wrongQueries = []string{"after=-1&limit=1e9", "limit=x&cursor=!!", "item=-1&strategy=%27%3B--", "repair=maybe&account=..%2F"}
)

// leaks are texts that must never reach a client: driver and parser
// internals, stack traces.
var leaks = []string{"SQLSTATE", "pgx", "pgconn", "parsing time", "int64", "strconv", "json: ", "goroutine",
	".go:", "runtime error", "panic", "unexpected EOF", "conn closed", "duplicate key value"}

// plausible is a well-formed value for a path parameter, so that hostile
// bodies get past the path and reach the body's decoder.
func plausible(route, param string) string {
	switch {
	case strings.HasPrefix(route, "/upload/") && param == "id":
		return "00000000-0000-4000-8000-000000000001"
	case param == "n":
		return "0"
	case param == "code":
		return "abc123"
	case param == "date":
		return "2026-01-02"
	case param == "sku":
		return "sku-1"
	case strings.HasPrefix(route, "/social/users/") || strings.HasPrefix(route, "/notify/users/"):
		return "user-0002"
	case strings.HasPrefix(route, "/points/accounts/"):
		return "acct-0001"
	}
	return "1"
}

func fill(route string, value func(param string) string) string {
	parts := strings.Split(route, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			parts[i] = value(p[1:])
		}
	}
	return strings.Join(parts, "/")
}

// problemCode is the code member of a problem document ("" if none).
func problemCode(b []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// snapshot fingerprints every table of the public schema.
func snapshot(t *testing.T, a *e2etest.App) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := a.Pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]string{}
	for _, tbl := range tables {
		var sum *string
		require.NoError(t, a.Pool.QueryRow(ctx, fmt.Sprintf(
			`SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM %q t`, tbl)).Scan(&sum))
		if sum != nil {
			out[tbl] = *sum
		} else {
			out[tbl] = "empty"
		}
	}
	return out
}

// The standing bad-input suite (issue 20): every route of the deployable —
// taken from the router, so a new route is covered the day it is added —
// gets the hostile inputs, as a user, an admin, a service and nobody. Every
// answer must be a 4xx problem+json without internals, and no row of any
// table may change.
func TestNoRouteAnswers500ToHostileInput(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	// The routes as the process mounts them.
	e := echo.New()
	for _, m := range a.Mods {
		if m.Routes != nil {
			m.Routes(e)
		}
	}
	type route struct{ method, path string }
	var routes []route
	for _, r := range e.Routes() {
		// The console (/, /console/…) is the HTML operator UI of another
		// module, not the JSON API: left out of this table (issue 20 covers
		// the API); its own tests own its answers.
		if r.Method == echo.RouteNotFound || r.Path == "/" || strings.HasPrefix(r.Path, "/console") {
			continue
		}
		routes = append(routes, route{r.Method, r.Path})
	}
	routes = append(routes, route{"GET", "/healthz"}, route{"GET", "/readyz"}, route{"GET", "/metrics"})
	sort.Slice(routes, func(i, j int) bool { return routes[i].path+routes[i].method < routes[j].path+routes[j].method })
	require.Greater(t, len(routes), 40, "the router lists the deployable's routes")

	tokens := map[string]string{
		"user":    a.Token(t, "user-0001", httpx.RoleUser),
		"admin":   a.Token(t, "admin-0001", httpx.RoleAdmin),
		"service": a.Token(t, "svc-0001", httpx.RoleService),
		"nobody":  "",
	}
	// Lazy bookkeeping that a first ordinary request writes (the blob
	// store's identity row, the like counter's consumer row) happens
	// before the snapshot: it is not an effect of a hostile input. (The
	// wrongQueries below do run admin operations whose unused parameters
	// are ignored; on this empty database they change nothing.)
	for _, warm := range []e2etest.Req{
		{Method: "GET", Path: "/outbox/consumers", Token: tokens["admin"]},
		{Method: "GET", Path: "/upload/files/00000000-0000-4000-8000-000000000001", Token: tokens["user"]},
		{Method: "POST", Path: "/upload/gc", Token: tokens["admin"]},
		{Method: "POST", Path: "/social/admin/likes/recompute", Token: tokens["admin"]},
	} {
		r := a.Do(t, warm)
		require.Less(t, r.Status, 500, "%s %s: %s", warm.Method, warm.Path, r.Body)
	}
	before := snapshot(t, a)
	send := func(method, path string, body []byte, tok string) (int, http.Header, []byte) {
		req, err := http.NewRequest(method, a.URL+path, bytes.NewReader(body))
		require.NoError(t, err)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		req.Header.Set(idem.Header, "hostile-key-1")
		resp, err := a.Client.Do(req)
		require.NoError(t, err, "%s %s", method, path)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	// Failures are collected (the assertions stay on this goroutine) so
	// that one run lists every offending route.
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	var problem func(what string, h http.Header, body []byte)
	check := func(what string, status int, h http.Header, body []byte) {
		if status < 400 || status >= 500 {
			fail("%s: want a 4xx, got %d: %.200s", what, status, body)
			return
		}
		problem(what, h, body)
	}
	problem = func(what string, h http.Header, body []byte) {
		if !strings.HasPrefix(what, "HEAD ") && h.Get("Content-Type") != httpx.ProblemContentType {
			fail("%s: not problem+json: %.200s", what, body)
		}
		for _, l := range leaks {
			if strings.Contains(string(body), l) {
				fail("%s leaks internals (%q): %.200s", what, l, body)
			}
		}
	}
	requests, refusedDeep := 0, 0
	_ = problem
	for _, r := range routes {
		takesBody := r.method == "POST" || r.method == "PUT" || r.method == "PATCH"
		for who, tok := range tokens {
			// Hostile path parameters (and one plausible path with hostile queries).
			if strings.Contains(r.path, ":") {
				for _, hp := range hostilePaths {
					path := fill(r.path, func(string) string { return hp })
					var body []byte
					if takesBody {
						body = []byte(`{}`)
					}
					st, h, b := send(r.method, path, body, tok)
					check(fmt.Sprintf("%s %s as %s", r.method, path, who), st, h, b)
					requests++
				}
			}
			for _, q := range hostileQueries {
				path := fill(r.path, func(p string) string { return plausible(r.path, p) }) + "?" + q
				st, h, b := send(r.method, path, nil, tok)
				check(fmt.Sprintf("%s %s as %s", r.method, path, who), st, h, b)
				requests++
			}
			for _, q := range wrongQueries {
				path := fill(r.path, func(p string) string { return plausible(r.path, p) }) + "?" + q
				st, h, b := send(r.method, path, nil, tok)
				what := fmt.Sprintf("%s %s as %s", r.method, path, who)
				if st >= 500 {
					fail("%s: want no 5xx, got %d: %.200s", what, st, b)
				} else if st >= 400 {
					problem(what, h, b)
				}
				requests++
			}
			if !takesBody {
				continue
			}
			path := fill(r.path, func(p string) string { return plausible(r.path, p) })
			for name, body := range hostileBodies {
				st, h, b := send(r.method, path, []byte(body), tok)
				what := fmt.Sprintf("%s %s as %s with %s", r.method, path, who, name)
				check(what, st, h, b)
				if tooDeep[name] && st == http.StatusBadRequest {
					if code := problemCode(b); code != "body_too_deep" && code != "body_not_allowed" {
						fail("%s: want 400 body_too_deep, got %s: %.200s", what, code, b)
					}
					if problemCode(b) == "body_too_deep" {
						refusedDeep++
					}
				}
				requests++
			}
		}
	}
	t.Logf("%d routes, %d hostile requests, %d refused as too deep", len(routes), requests, refusedDeep)
	require.Greater(t, refusedDeep, 3*20, "the deep bodies reach the decoder of most routes that take a body")
	require.Empty(t, failures, "%d hostile requests were not refused cleanly:\n%s", len(failures), strings.Join(failures, "\n"))
	require.Equal(t, before, snapshot(t, a), "a refused request changed no row")
	e2etest.Assert(t, a.Pool)
}

// Issue 20 item 1, exactly as the probes sent it: a NUL or a lone
// surrogate in a field that is stored (a post body, notify data — key or
// value —, a workflow's input, a review's reason, a user id in the path)
// used to reach PostgreSQL and come back as a 500 (SQLSTATE 22021, 22P05,
// 22P02). Each is a 400 invalid_text now, decided before anything is
// written.
func TestUnstorableTextIsA400BeforeAnyWrite(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	user := a.Token(t, "user-0001", httpx.RoleUser)
	admin := a.Token(t, "admin-0001", httpx.RoleAdmin)
	svc := a.Token(t, "svc-0001", httpx.RoleService)
	before := snapshot(t, a)
	for _, bad := range []string{`\u0000`, `\ud800`, `\udfff`} {
		for _, c := range []e2etest.Req{
			{Method: "POST", Path: "/social/posts", Token: user, Body: `{"body":"a` + bad + `b","visibility":"public"}`},
			{Method: "POST", Path: "/notify/events", Token: svc, Body: `{"user_id":"user-0001","event_key":"k-1","template":"order_shipped","data":{"order":"x` + bad + `"}}`},
			{Method: "POST", Path: "/notify/events", Token: svc, Body: `{"user_id":"user-0001","event_key":"k-1","template":"order_shipped","data":{"k` + bad + `":"v"}}`},
			{Method: "POST", Path: "/workflows", Token: admin, Body: `{"business_key":"wf-1","input":{"x":"` + bad + `"}}`},
			{Method: "POST", Path: "/notify/review/1/resolve", Token: admin, Body: `{"action":"give_up","reason":"` + bad + `"}`},
			{Method: "POST", Path: "/shortlink/links", Token: user, Body: `{"target":"https://example.com/","alias":"a` + bad + `b"}`},
		} {
			c.Invalid = true
			r := a.Do(t, c)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s %s %s: %s", c.Method, c.Path, c.Body, r.Body)
			require.Equal(t, "invalid_text", r.Code(), "%s", c.Body)
		}
	}
	for _, p := range []string{"/notify/users/x%00y/preferences", "/notify/users/x%ED%A0%80y/preferences"} {
		r := a.Do(t, e2etest.Req{Method: "GET", Path: p, Token: admin, Invalid: true})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", p, r.Body)
		require.Equal(t, "invalid_text", r.Code())
	}
	require.Equal(t, before, snapshot(t, a), "nothing written")
	e2etest.Assert(t, a.Pool)
}

// Issue 20 item 17: `--help` is not an error (exit 0), and the token
// secret taken from the environment is never printed as a flag default.
func TestHelpExitsZeroAndNeverPrintsTheSecret(t *testing.T) {
	t.Parallel()
	bin := e2etest.Binary(t)
	const secret = "do-not-print-this-secret-0123456789"
	for _, args := range [][]string{{"serve", "--help"}, {"worker", "--help"}, {"token", "--help"}, {"dev", "--help"}, {"serve", "-h"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cmd.Environ(), "FENCELAB_TOKEN_SECRET="+secret)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v exits 0: %s", args, out)
		require.Contains(t, string(out), "-token-secret", "%v", args)
		require.NotContains(t, string(out), secret, "%v", args)
	}
	out, err := exec.Command(bin, "serve", "--no-such-flag").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, 2, ee.ExitCode(), "a usage mistake is still exit 2")
}
