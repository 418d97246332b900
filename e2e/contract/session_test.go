package contract_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// session sends requests through Prism and keeps what it saw.
type session struct {
	t          *testing.T
	via        *lab.App // the app's client, pointed at Prism
	sent       int
	byClass    map[int]int // 2xx, 3xx, 4xx → count
	modules    map[string]bool
	violations []string
}

// do sends r through Prism and requires one of the statuses in want. A
// response Prism found in breach of the contract carries its violations
// in the sl-violations header, or (with --errors) is replaced by Prism's
// own problem whose type names its error kind; either is recorded.
func (s *session) do(r e2etest.Req, want ...int) e2etest.Response {
	s.t.Helper()
	resp := s.via.Do(s.t, r)
	s.sent++
	s.byClass[resp.Status/100]++
	s.modules[strings.Split(strings.TrimPrefix(r.Path, "/"), "/")[0]] = true
	if v := resp.Header.Values("sl-violations"); len(v) > 0 {
		s.violations = append(s.violations, fmt.Sprintf("%s %s → %d: %s", r.Method, r.Path, resp.Status, strings.Join(v, "; ")))
	}
	var p struct{ Type string }
	if json.Unmarshal(resp.Body, &p) == nil && strings.Contains(p.Type, "stoplight.io/prism") {
		s.violations = append(s.violations, fmt.Sprintf("%s %s → %d from Prism: %.1000s", r.Method, r.Path, resp.Status, resp.Body))
	}
	if !slices.Contains(want, resp.Status) { // not fatal: one run shows every step that went wrong
		s.t.Errorf("%s %s: want %v, got %d: %.1000s", r.Method, r.Path, want, resp.Status, resp.Body)
	}
	return resp
}

// id reads a field of a JSON answer as text (numbers and strings alike).
func id(t *testing.T, r e2etest.Response, field string) string {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	v, ok := m[field]
	require.True(t, ok, "%s in %s", field, r.Body)
	if f, ok := v.(float64); ok {
		return fmt.Sprint(int64(f))
	}
	return fmt.Sprint(v)
}

// TestRecordedSessionMatchesTheContractThroughPrism: Prism 5, the
// validating proxy client authors put between their code and a server,
// stands in front of the deployable with the served contract, and a
// session that walks the chapter pages' "Try it" steps — successes and
// refusals in every module — goes through it. Prism must find no request
// or response in breach of the contract. (The e2e client checks every
// exchange with kin-openapi too; Prism reads the document differently, and
// the two must agree.)
func TestRecordedSessionMatchesTheContractThroughPrism(t *testing.T) {
	t.Parallel()
	npmTool(t, "prism") // before the app: a missing tool fails at once
	a := e2etest.Start(t, e2etest.Options{Tasks: true})
	ctx := context.Background()
	for _, m := range a.Mods {
		if m.Seed != nil {
			require.NoError(t, m.Seed(ctx), "seed %s", m.Name)
		}
	}
	base, prismLog := prism(t, servedContract(t, a), a.URL)
	noFollow := &http.Client{Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	via, direct := *a.App, *a.App
	via.URL, via.Client, direct.Client = base, noFollow, noFollow
	s := &session{t: t, via: &via, byClass: map[int]int{}, modules: map[string]bool{}}
	defer func() {
		if t.Failed() {
			t.Logf("prism log:\n%s", prismLog())
		}
	}()

	tok := func(sub string, role httpx.Role) string { return a.Token(t, sub, role) }
	u42, u43, u44 := tok("user-0042", httpx.RoleUser), tok("user-0043", httpx.RoleUser), tok("user-0044", httpx.RoleUser)
	u45, u46 := tok("user-0045", httpx.RoleUser), tok("user-0046", httpx.RoleUser)
	admin, svc := tok("admin-1", httpx.RoleAdmin), tok("svc-orders", httpx.RoleService)
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }

	// Core: health, the contract, the outbox, the claim engine (chapters 2, 4).
	s.do(e2etest.Req{Method: "GET", Path: "/healthz"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/readyz"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/metrics"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/openapi.json"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/openapi.yaml"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/docs/api"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/outbox/consumers", Token: admin}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/outbox/consumers", Token: u42}, 403)
	wf := s.do(e2etest.Req{Method: "POST", Path: "/workflows", Token: admin,
		Body: map[string]any{"business_key": "wf-0042", "input": map[string]string{"report": "daily"}}}, 202)
	job := id(t, wf, "job_id")
	s.do(e2etest.Req{Method: "POST", Path: "/workflows", Token: admin, Body: map[string]any{"business_key": "wf-0042"}}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/jobs/" + job, Token: admin}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/jobs/" + job, Token: u42}, 403)
	s.do(e2etest.Req{Method: "GET", Path: "/jobs/999999999", Token: admin}, 404)

	// Chapter 1: the report a lease-holder writes.
	s.do(e2etest.Req{Method: "GET", Path: "/reports/" + time.Now().UTC().Format(time.DateOnly), Token: u42}, 200, 404)
	s.do(e2etest.Req{Method: "GET", Path: "/reports/2031-01-01", Token: u42}, 404)

	// Chapters 3 and 5: points, idempotency keys.
	s.do(e2etest.Req{Method: "GET", Path: "/points/accounts/acct-0042", Token: u42}, 200)
	debit := e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: u42,
		Headers: idem("prize-17-1"), Body: map[string]any{"amount": 30, "reason": "prize-17"}}
	s.do(debit, 201)
	replay := s.do(debit, 201)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: u42,
		Headers: idem("prize-17-1"), Body: map[string]any{"amount": 31, "reason": "prize-17"}}, 422)
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: u42,
		Headers: idem("prize-99-1"), Body: map[string]any{"amount": 5000, "reason": "prize-99"}}, 409)
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/grants", Token: svc,
		Headers: idem("bonus-2026-11"), Body: map[string]any{"amount": 250, "reason": "monthly bonus"}}, 201)
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/grants", Token: u42,
		Headers: idem("bonus-self"), Body: map[string]any{"amount": 250, "reason": "self bonus"}}, 403)
	s.do(e2etest.Req{Method: "GET", Path: "/points/accounts/acct-0042/entries?limit=2", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/points/accounts/acct-0043", Token: u42}, 403)
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0043/debits", Token: u43,
		Headers: idem("idem-demo-1"), Body: map[string]any{"amount": 20, "reason": "idem demo"}}, 201)
	s.do(e2etest.Req{Method: "GET", Path: "/points/accounts/acct-0043", Token: u43}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts", Token: admin, Body: map[string]any{"id": "acct-0047", "owner": "user-0047"}}, 201)
	s.do(e2etest.Req{Method: "POST", Path: "/points/accounts", Token: admin, Body: map[string]any{"id": "acct-0047", "owner": "user-0047"}}, 409)
	s.do(e2etest.Req{Method: "GET", Path: "/points/accounts/acct-9999", Token: admin}, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/points/admin/recompute", Token: admin}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/points/admin/recompute?repair=true", Token: admin}, 200)

	// Chapters 6 and 7: reservations, orders, payment.
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/skus/sku-lab-01"}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/skus/sku-none-01"}, 404)
	res := s.do(e2etest.Req{Method: "POST", Path: "/flashsale/reservations", Token: u42,
		Body: map[string]any{"sku": "sku-lab-01", "request_key": "b6a1c0de-0042"}}, 201)
	resID := id(t, res, "id")
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/reservations/" + resID, Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/reservations/" + resID, Token: u43}, 403, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/flashsale/reservations", Token: u42,
		Body: map[string]any{"sku": "sku-lab-01", "request_key": "b6a1c0de-0042"}}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/flashsale/reservations", Token: u42,
		Body: map[string]any{"sku": "sku-lab-01", "request_key": "b6a1c0de-0043"}}, 409)
	s.do(e2etest.Req{Method: "POST", Path: "/flashsale/admin/release-expired", Token: admin}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/admin/admission", Token: admin}, 200)
	res45 := s.do(e2etest.Req{Method: "POST", Path: "/flashsale/reservations", Token: u45,
		Body: map[string]any{"sku": "sku-lab-01", "request_key": "demo-0045"}}, 201)
	order := s.do(e2etest.Req{Method: "POST", Path: "/flashsale/orders", Token: u45, Headers: idem("order-demo-0045"),
		Body: json.RawMessage(`{"reservation_id":` + id(t, res45, "id") + `}`)}, 201)
	orderID := id(t, order, "id")
	s.do(e2etest.Req{Method: "POST", Path: "/flashsale/orders/" + orderID + "/pay", Token: u45}, 200, 202)
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/orders/" + orderID, Token: u45}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/orders/" + orderID, Token: u46}, 403, 404)
	s.do(e2etest.Req{Method: "GET", Path: "/flashsale/orders/999999999", Token: u45}, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/flashsale/admin/reconcile", Token: admin}, 200)

	// Chapters 8 to 10: relations, feed, likes.
	s.do(e2etest.Req{Method: "GET", Path: "/social/me", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/users/user-0043/posts", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/posts/2", Token: u44}, 403)
	s.do(e2etest.Req{Method: "GET", Path: "/social/requests", Token: u43}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/social/requests/user-0044/approve", Token: u43}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/posts/2", Token: u44}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/users/user-0043/relation", Token: u44}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/users/user-0045/relation", Token: u42}, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/social/users/user-0045/follow", Token: u42}, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/social/users/user-0044/block", Token: u43}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/posts/1", Token: u44}, 403)
	s.do(e2etest.Req{Method: "POST", Path: "/social/users/user-0043/follow", Token: u44}, 403)
	s.do(e2etest.Req{Method: "POST", Path: "/social/users/user-0044/unblock", Token: u43}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/users/user-0043/followers", Token: u43}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/users/user-0042/following", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/users/user-0043/counts", Token: u42}, 200)
	post := s.do(e2etest.Req{Method: "POST", Path: "/social/posts", Token: u42, Headers: idem("p-1"),
		Body: map[string]any{"body": "hello", "visibility": "FOLLOWERS"}}, 201)
	postID := id(t, post, "post_id")
	s.do(e2etest.Req{Method: "PATCH", Path: "/social/posts/" + postID, Token: u42, Body: map[string]any{"visibility": "SELF"}}, 200)
	s.do(e2etest.Req{Method: "PATCH", Path: "/social/posts/" + postID, Token: u43, Body: map[string]any{"visibility": "PUBLIC"}}, 403, 404)
	s.do(e2etest.Req{Method: "GET", Path: "/social/posts/" + postID, Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/posts/999999999", Token: u42}, 404)
	s.do(e2etest.Req{Method: "GET", Path: "/social/views", Token: admin}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/views", Token: u42}, 403)
	page := s.do(e2etest.Req{Method: "GET", Path: "/social/feed?limit=1", Token: u43}, 200)
	var feed struct{ Next string }
	page.JSON(t, &feed)
	if feed.Next != "" {
		s.do(e2etest.Req{Method: "GET", Path: "/social/feed?limit=1&cursor=" + feed.Next, Token: u43}, 200)
	}
	s.do(e2etest.Req{Method: "GET", Path: "/social/feed?strategy=pull", Token: u43}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/feed?cursor=not-a-cursor", Token: u43}, 400)
	s.do(e2etest.Req{Method: "POST", Path: "/social/items/1/like", Token: u46}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/social/items/1/like", Token: u46}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/social/items/1/likes", Token: u46}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/social/items/1/unlike", Token: u46}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/social/admin/likes/recompute", Token: admin}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/social/admin/likes/recompute", Token: u46}, 403)

	// Chapter 11: notifications.
	s.do(e2etest.Req{Method: "PUT", Path: "/notify/users/user-0042/preferences", Token: u42,
		Body: map[string]any{"channels": map[string]bool{"email": true, "sms": true, "push": true}}}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/users/user-0042/preferences", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/users/user-0042/preferences", Token: u43}, 403)
	event := map[string]any{"user_id": "user-0042", "event_key": "order:ord-1001:shipped", "template": "order_shipped",
		"data": map[string]string{"order": "ord-1001"}}
	n := s.do(e2etest.Req{Method: "POST", Path: "/notify/events", Token: svc, Body: event}, 201)
	nid := id(t, n, "id")
	s.do(e2etest.Req{Method: "POST", Path: "/notify/events", Token: svc, Body: event}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/notify/events", Token: svc,
		Body: map[string]any{"user_id": "user-0042", "event_key": "order:ord-1001:lost", "template": "order_lost"}}, 422)
	s.do(e2etest.Req{Method: "POST", Path: "/notify/events", Token: u42, Body: event}, 403)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/notifications/" + nid, Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/notifications/" + nid, Token: u43}, 403, 404)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/notifications/999999999", Token: admin}, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/notify/admin/loopback/push/faults", Token: admin, Body: map[string]any{"drop_response": true}}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/notify/events", Token: svc,
		Body: map[string]any{"user_id": "user-0043", "event_key": "order:ord-1002:shipped", "template": "order_shipped"}}, 201)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/review", Token: admin}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/notify/review", Token: u42}, 403)
	s.do(e2etest.Req{Method: "POST", Path: "/notify/review/999999999/resolve", Token: admin,
		Body: map[string]any{"action": "delivered", "reason": "push console shows it delivered"}}, 404)

	// Chapter 12: short links. Prism's proxy follows a redirect itself
	// (node-fetch's default, with no option to turn it off) and would
	// answer with the target's page, so the 302s go to the app directly,
	// where the e2e client checks them against the same document; the
	// refusals of /s/{code} go through Prism.
	redirect := func(path string) {
		t.Helper()
		r := direct.Do(t, e2etest.Req{Method: "GET", Path: path})
		require.Equal(t, http.StatusFound, r.Status, "GET %s: %s", path, r.Body)
		require.NotEmpty(t, r.Header.Get("Location"))
		r = direct.Do(t, e2etest.Req{Method: "HEAD", Path: path})
		require.Equal(t, http.StatusFound, r.Status, "HEAD %s", path)
	}
	redirect("/s/demo")
	s.do(e2etest.Req{Method: "POST", Path: "/shortlink/links", Token: u42,
		Body: map[string]any{"target": "https://book.example.test/ch/9", "alias": "ch9"}}, 201)
	s.do(e2etest.Req{Method: "POST", Path: "/shortlink/links", Token: u42,
		Body: map[string]any{"target": "https://book.example.test/other", "alias": "ch9"}}, 409)
	s.do(e2etest.Req{Method: "POST", Path: "/shortlink/links", Token: u42,
		Body: map[string]any{"target": "https://book.example.test/", "expires_at": "2030-01-01T00:00:00Z"}}, 201)
	redirect("/s/ch9")
	s.do(e2etest.Req{Method: "GET", Path: "/shortlink/links/ch9", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/shortlink/links/ch9/stats", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/shortlink/links/ch9/stats", Token: u43}, 403, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/shortlink/links/ch9/revoke", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/s/ch9"}, 410)
	s.do(e2etest.Req{Method: "HEAD", Path: "/s/ch9"}, 410)
	s.do(e2etest.Req{Method: "GET", Path: "/s/no-such-link"}, 404)
	s.do(e2etest.Req{Method: "HEAD", Path: "/s/no-such-link"}, 404)

	// Chapter 13: chunked upload of "hello" in one chunk.
	const hello, helloSHA = "hello", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	up := s.do(e2etest.Req{Method: "POST", Path: "/upload/sessions", Token: u42,
		Body: map[string]any{"total_size": 5, "chunk_count": 1, "sha256": helloSHA}}, 201)
	sid := id(t, up, "id")
	chunk := e2etest.Req{Method: "PUT", Path: "/upload/sessions/" + sid + "/chunks/0", Token: u42, Body: hello,
		Headers: map[string]string{"Content-Type": "application/octet-stream", "Content-SHA256": helloSHA}}
	s.do(chunk, 201)
	s.do(chunk, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/upload/sessions/" + sid, Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/upload/sessions/" + sid, Token: u43}, 403, 404)
	s.do(e2etest.Req{Method: "POST", Path: "/upload/sessions/" + sid + "/complete", Token: u42}, 200)
	file := s.do(e2etest.Req{Method: "POST", Path: "/upload/sessions/" + sid + "/commit", Token: u42,
		Body: map[string]any{"name": "hello.txt", "metadata": map[string]string{"album": "lab"}}}, 201)
	fid := id(t, file, "id")
	e2etest.WaitFor(t, 0, "the file is published", func() bool {
		var info struct{ State string }
		a.Do(t, e2etest.Req{Method: "GET", Path: "/upload/files/" + fid + "/info", Token: u42}).JSON(t, &info)
		return info.State == "published"
	})
	s.do(e2etest.Req{Method: "GET", Path: "/upload/files/" + fid + "/info", Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/upload/files/" + fid, Token: u42}, 200)
	s.do(e2etest.Req{Method: "GET", Path: "/upload/files/" + fid, Token: u42, Headers: map[string]string{"Range": "bytes=0-1"}}, 206)
	other := s.do(e2etest.Req{Method: "POST", Path: "/upload/sessions", Token: u42,
		Body: map[string]any{"total_size": 5, "chunk_count": 1, "sha256": helloSHA}}, 201)
	s.do(e2etest.Req{Method: "DELETE", Path: "/upload/sessions/" + id(t, other, "id"), Token: u42}, 200)
	s.do(e2etest.Req{Method: "POST", Path: "/upload/gc", Token: admin}, 200, 202)

	t.Logf("sent %d requests through Prism: %d 2xx, %d 3xx, %d 4xx, modules %v", s.sent, s.byClass[2], s.byClass[3], s.byClass[4], s.modules)
	require.GreaterOrEqual(t, s.sent, 100, "a session of at least 100 requests")
	require.Greater(t, s.byClass[2], 60, "success answers")
	require.Greater(t, s.byClass[4], 30, "problem answers")
	for _, m := range []string{"points", "flashsale", "social", "notify", "shortlink", "s", "upload", "jobs", "reports"} {
		require.True(t, s.modules[m], "the session reaches /%s", m)
	}
	require.Empty(t, s.violations, "Prism found requests or responses in breach of the contract")
	require.NotContains(t, prismLog(), "Violation", "Prism logged a violation")
}
