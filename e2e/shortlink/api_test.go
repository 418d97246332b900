package shortlink_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	shortlinklab "github.com/fencelab/fencelab/lab/shortlink"
	"github.com/fencelab/fencelab/services/shortlink"
)

// The main path end to end: create, follow, revoke, 410, and the click
// counted in the owner's stats.
func TestCreateFollowRevokeAndCountTheClick(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{Tasks: true, Settings: map[string]string{shortlink.EnvClickInterval: "10ms", shortlink.EnvStatsTimeout: "5s"}})
	tok := a.UserToken(t, "user-0042")

	l := a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://book.example.test/ch/9?x=1#top"})
	require.Len(t, l.Code, shortlink.RandomCodeLen)
	require.Equal(t, "user-0042", l.Owner)
	require.Equal(t, shortlink.StateLive, l.State)
	require.False(t, l.Custom)
	require.True(t, strings.HasSuffix(l.ShortURL, "/s/"+l.Code), l.ShortURL)

	r := a.Visit(t, l.Code)
	require.Equal(t, http.StatusFound, r.Status)
	require.Equal(t, "https://book.example.test/ch/9?x=1#top", r.Header.Get("Location"))

	require.Eventually(t, func() bool { return a.Stats(t, tok, l.Code).Clicks == 1 }, 10*time.Second, 10*time.Millisecond)

	r = a.Revoke(t, tok, l.Code)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var revoked shortlink.Link
	r.JSON(t, &revoked)
	require.Equal(t, shortlink.StateRevoked, revoked.State)
	require.NotNil(t, revoked.RevokedAt)

	r = a.Visit(t, l.Code)
	require.Equal(t, http.StatusGone, r.Status)
	require.Equal(t, "link_revoked", r.Code())

	// Revoking again changes nothing: the first revocation time stands.
	var again shortlink.Link
	r = a.Revoke(t, tok, l.Code)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &again)
	require.True(t, revoked.RevokedAt.Equal(*again.RevokedAt))

	st := a.Stats(t, tok, l.Code)
	require.Equal(t, shortlink.Stats{Code: l.Code, Clicks: 1, Dropped: 0}, st)
	e2etest.Assert(t, a.Pool, "shortlink")
}

func TestTargetURLRules(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
	tok := a.UserToken(t, "user-0042")
	bad := map[string]string{
		"empty":              "",
		"javascript":         "javascript:alert(1)",
		"data":               "data:text/html,<script>alert(1)</script>",
		"ftp":                "ftp://files.example.test/a",
		"file":               "file:///etc/passwd",
		"relative":           "/just/a/path",
		"scheme-relative":    "//example.test/a",
		"no host":            "https:///path",
		"opaque":             "http:example.test",
		"single slash":       "https:/example.test/a",
		"userinfo":           "https://bank.example.test@evil.example.test/",
		"user and password":  "https://user:pw@example.test/",
		"space":              "https://example.test/a b",
		"tab":                "https://example.test/\ta",
		"newline (header)":   "https://example.test/\r\nSet-Cookie: x=1",
		"DEL":                "https://example.test/\x7f",
		"non-ASCII":          "https://exämple.test/",
		"leading whitespace": " https://example.test/",
		"backslash":          "https://example.test\\@evil.example.test/",
		"bad escape":         "https://example.test/%zz",
		"too long":           "https://example.test/" + strings.Repeat("a", shortlink.MaxTargetLen),
		"port out of range":  "https://example.test:70000/",
	}
	for name, target := range bad {
		r := a.BadInput().Create(t, tok, map[string]any{"target": target})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, "invalid_target", r.Code(), name)
	}
	// A NUL is refused at the edge, like in every body (400 invalid_text).
	r := a.Create(t, tok, map[string]any{"target": "https://example.test/\x00"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "invalid_text", r.Code())
	good := []string{
		"http://example.test",
		"HTTPS://EXAMPLE.TEST/Upper",
		"https://example.test:8443/a/b?q=1&r=%20#frag",
		"https://[2001:db8::1]/v6",
		"https://example.test/" + strings.Repeat("a", shortlink.MaxTargetLen-len("https://example.test/")),
	}
	for _, target := range good {
		l := a.MustCreate(t, tok, shortlink.CreateRequest{Target: target})
		r := a.Visit(t, l.Code)
		require.Equal(t, http.StatusFound, r.Status)
		require.Equal(t, target, r.Header.Get("Location"), "the Location is the target as given")
	}
	var n int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM shortlink_links`).Scan(&n))
	require.Equal(t, len(good), n, "no refused target was stored")
	e2etest.Assert(t, a.Pool, "shortlink")
}

func TestAliasRules(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
	tok := a.UserToken(t, "user-0042")
	target := "https://example.test/"
	for alias, code := range map[string]string{
		"ab":                     "invalid_alias", // too short
		strings.Repeat("a", 65):  "invalid_alias", // too long
		"has space":              "invalid_alias",
		"dot.ted":                "invalid_alias",
		"slash/ed":               "invalid_alias",
		"ümlaut":                 "invalid_alias",
		"percent%41":             "invalid_alias",
		"admin":                  "alias_reserved",
		"Metrics":                "alias_reserved", // reserved words are case-insensitive
		"shortlink":              "alias_reserved",
		"emoji-\U0001F600-alias": "invalid_alias",
	} {
		r := a.BadInput().Create(t, tok, shortlink.CreateRequest{Target: target, Alias: alias})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%q: %s", alias, r.Body)
		require.Equal(t, code, r.Code(), alias)
	}
	for _, alias := range []string{"abc", strings.Repeat("Z", 64), "spring_sale-2026", "A-b_9"} {
		l := a.MustCreate(t, tok, shortlink.CreateRequest{Target: target, Alias: alias})
		require.Equal(t, strings.ToLower(alias), l.Code, "aliases are stored in lower case")
		require.True(t, l.Custom)
		require.Equal(t, http.StatusFound, a.Visit(t, alias).Status)
	}
	// Aliases are case-insensitive: "ABC" is the alias "abc", and taken.
	require.Equal(t, http.StatusFound, a.Visit(t, "ABC").Status)
	r0 := a.Create(t, tok, shortlink.CreateRequest{Target: target, Alias: "ABC"})
	require.Equal(t, http.StatusConflict, r0.Status, string(r0.Body))

	// Malformed bodies are the client's mistake, never a 500.
	for _, body := range []string{`{"target": 1}`, `{"target":"https://example.test/","extra":true}`, `not json`,
		`{"target":"https://example.test/","expires_at":"tomorrow"}`} {
		r := a.BadInput().Create(t, tok, body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Body)
	}
	past := time.Now().Add(-time.Minute)
	r := a.Create(t, tok, shortlink.CreateRequest{Target: target, ExpiresAt: &past})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Equal(t, "invalid_expiry", r.Code())
	e2etest.Assert(t, a.Pool, "shortlink")
}

// Only the owner revokes, reads or counts a link; anyone may follow it.
func TestOnlyTheOwnerMayRevokeReadOrCount(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
	owner, other := a.UserToken(t, "user-0042"), a.UserToken(t, "user-0043")
	l := a.MustCreate(t, owner, shortlink.CreateRequest{Target: "https://example.test/mine", Alias: "mine"})

	r := a.Revoke(t, other, "mine")
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
	require.Equal(t, "forbidden", r.Code())
	for _, path := range []string{"/shortlink/links/mine", "/shortlink/links/mine/stats"} {
		require.Equal(t, http.StatusForbidden, a.Do(t, e2etest.Req{Method: "GET", Path: path, Token: other}).Status, path)
		require.Equal(t, http.StatusUnauthorized, a.Do(t, e2etest.Req{Method: "GET", Path: path}).Status, path)
	}
	require.Equal(t, http.StatusUnauthorized, a.Revoke(t, "", "mine").Status)
	require.Equal(t, http.StatusNotFound, a.Revoke(t, owner, "nosuchcode").Status)

	var revokedAt *time.Time
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT revoked_at FROM shortlink_links WHERE code = $1`, l.Code).Scan(&revokedAt))
	require.Nil(t, revokedAt, "the refused revoke changed nothing")
	require.Equal(t, http.StatusFound, a.Visit(t, "mine").Status)

	// An admin may take a link down (abuse), as everywhere in Fencelab.
	admin := a.Token(t, "admin-0001", httpx.RoleAdmin)
	require.Equal(t, http.StatusOK, a.Revoke(t, admin, "mine").Status)
	require.Equal(t, http.StatusGone, a.Visit(t, "mine").Status)
	e2etest.Assert(t, a.Pool, "shortlink")
}

// 404 for unknown and malformed codes, 410 for expired links; an unknown
// code that is created later redirects at once on the replica that
// created it (the cached "unknown" is dropped).
func TestUnknownExpiredAndLaterCreatedCodes(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
	tok := a.UserToken(t, "user-0042")
	for _, code := range []string{"later", "x", strings.Repeat("a", 65), "bad.code", "%2e%2e"} {
		r := a.BadInput().Visit(t, code) // mostly codes no link can have
		require.Equal(t, http.StatusNotFound, r.Status, code)
	}
	require.Equal(t, "link_not_found", a.Visit(t, "later").Code())
	a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://example.test/later", Alias: "later"})
	require.Equal(t, http.StatusFound, a.Visit(t, "later").Status)

	// A link that expired a minute ago, stored as creation stores it.
	_, err := a.Pool.Exec(context.Background(), `
WITH link AS (
    INSERT INTO shortlink_links (code, target, owner, custom, created_at, expires_at)
    VALUES ('gone', 'https://example.test/gone', 'user-0042', true, now() - interval '1 hour', now() - interval '1 minute')
    RETURNING code, target, owner, created_at)
INSERT INTO shortlink_creations (code, target, owner, created_at) SELECT * FROM link`)
	require.NoError(t, err)
	r := a.Visit(t, "gone")
	require.Equal(t, http.StatusGone, r.Status)
	require.Equal(t, "link_expired", r.Code())
	var l shortlink.Link
	a.Do(t, e2etest.Req{Method: "GET", Path: "/shortlink/links/gone", Token: tok}).JSON(t, &l)
	require.Equal(t, shortlink.StateExpired, l.State)

	future := time.Now().Add(time.Hour)
	a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://example.test/soon", Alias: "soon", ExpiresAt: &future})
	require.Equal(t, http.StatusFound, a.Visit(t, "soon").Status)
	e2etest.Assert(t, a.Pool, "shortlink")
}

// The database refuses what the service never does: changing a target,
// un-revoking, deleting a code, rewriting the creation record (SL-I1).
func TestTheSchemaRefusesToOverwriteALink(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
	tok := a.UserToken(t, "user-0042")
	a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://example.test/fixed", Alias: "fixed"})
	require.Equal(t, http.StatusOK, a.Revoke(t, tok, "fixed").Status)
	ctx := context.Background()
	for _, sql := range []string{
		`UPDATE shortlink_links SET target = 'https://evil.example.test/' WHERE code = 'fixed'`,
		`UPDATE shortlink_links SET expires_at = now() + interval '1 day' WHERE code = 'fixed'`,
		`UPDATE shortlink_links SET revoked_at = NULL WHERE code = 'fixed'`,
		`DELETE FROM shortlink_links WHERE code = 'fixed'`,
		`UPDATE shortlink_creations SET target = 'https://evil.example.test/'`,
		`DELETE FROM shortlink_creations`,
	} {
		_, err := a.Pool.Exec(ctx, sql)
		require.Error(t, err, sql)
	}
	e2etest.Assert(t, a.Pool, "shortlink")
}

// `fencelab dev` seeds a demo link; seeding twice is harmless.
func TestSeedCreatesTheDemoLinkOnce(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
	require.NoError(t, a.Seed(context.Background(), "shortlink"))
	require.NoError(t, a.Seed(context.Background(), "shortlink"))
	r := a.Visit(t, shortlink.DemoCode)
	require.Equal(t, http.StatusFound, r.Status)
	require.Contains(t, r.Header.Get("Location"), "example.test")
	e2etest.Assert(t, a.Pool, "shortlink")
}

// The SQL invariants are not vacuous: each one reports rows broken by hand
// (with the guards that normally prevent them switched off; a click
// written by hand also moves its counter, so only the targeted invariant
// fails).
func TestInvariantsReportRowsBrokenByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for id, breakIt := range map[string][]string{
		"SL-I1": {
			`ALTER TABLE shortlink_links DISABLE TRIGGER shortlink_links_guard`,
			`UPDATE shortlink_links SET target = 'https://evil.example.test/' WHERE code = 'inv'`,
		},
		"SL-I2": {
			`INSERT INTO shortlink_clicks (id, code, clicked_at) VALUES (gen_random_uuid(), 'inv', now() + interval '2 hours')`,
			`INSERT INTO shortlink_click_count (code, clicks) VALUES ('inv', 1) ON CONFLICT (code) DO UPDATE SET clicks = shortlink_click_count.clicks + 1`,
		},
		"SL-I3": {
			`INSERT INTO shortlink_clicks (id, code, clicked_at) VALUES (gen_random_uuid(), 'nosuchcode', now())`,
			`INSERT INTO shortlink_click_count (code, clicks) VALUES ('nosuchcode', 1) ON CONFLICT (code) DO UPDATE SET clicks = shortlink_click_count.clicks + 1`,
		},
		"SL-I4": {
			`ALTER TABLE shortlink_clicks DROP CONSTRAINT shortlink_clicks_pkey`,
			`INSERT INTO shortlink_clicks (id, code, clicked_at) SELECT '00000000-0000-7000-8000-000000000001', 'inv', now() FROM generate_series(1, 2)`,
			`INSERT INTO shortlink_click_count (code, clicks) VALUES ('inv', 2) ON CONFLICT (code) DO UPDATE SET clicks = shortlink_click_count.clicks + 2`,
		},
		"SL-I5": { // a count(*) written by hand that the rows do not back
			`INSERT INTO shortlink_click_count (code, clicks) VALUES ('inv', 5)`,
		},
	} {
		t.Run(id, func(t *testing.T) {
			a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{})
			tok := a.UserToken(t, "user-0042")
			future := time.Now().Add(time.Hour)
			a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://example.test/inv", Alias: "inv", ExpiresAt: &future})
			require.Len(t, failing(ctx, a), 0)
			for _, sql := range breakIt {
				_, err := a.Pool.Exec(ctx, sql)
				require.NoError(t, err, sql)
			}
			require.Equal(t, []string{id}, failing(ctx, a))
		})
	}
}

// failing lists the shortlink data invariants that do not hold (a dropped
// guard is SL-S1's finding, a fact about the schema, not the data).
func failing(ctx context.Context, a *shortlinklab.Lab) []string {
	var ids []string
	for _, r := range e2etest.Invariants().Run(ctx, a.Pool, "shortlink") {
		if !r.Holds() && !r.Schema {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// A redirect whose read cannot finish within the lookup timeout answers 503
// with Retry-After — never a hanging request, never an answer older than
// the TTL — while links already cached keep redirecting.
func TestRedirectAnswers503WhenTheLinkStoreDoesNotAnswerInTime(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{Settings: map[string]string{shortlink.EnvCacheTTL: "1h", shortlink.EnvLookupTimeout: "100ms"}})
	tok := a.UserToken(t, "user-0042")
	a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://example.test/warm", Alias: "warm"})
	a.MustCreate(t, tok, shortlink.CreateRequest{Target: "https://example.test/cold", Alias: "cold"})
	// Warm the cache. On a loaded machine (or under -race) the first read
	// may itself miss the 100 ms deadline and answer 503; a later one lands.
	require.Eventually(t, func() bool { return a.Visit(t, "warm").Status == http.StatusFound },
		10*time.Second, 10*time.Millisecond, "the warm link never redirected")

	ctx := context.Background()
	locker, err := a.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, `LOCK TABLE shortlink_links IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	r := a.Visit(t, "cold")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Equal(t, "lookup_unavailable", r.Code())
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, http.StatusFound, a.Visit(t, "warm").Status, "a cached answer younger than the TTL is still served")

	require.NoError(t, locker.Rollback(ctx))
	require.Equal(t, http.StatusFound, a.Visit(t, "cold").Status)
	e2etest.Assert(t, a.Pool, "shortlink")
}
