package program_test

import (
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
	"github.com/fencelab/fencelab/services/notify"
	"github.com/fencelab/fencelab/services/points"
	"github.com/fencelab/fencelab/services/report"
	"github.com/fencelab/fencelab/services/shortlink"
	"github.com/fencelab/fencelab/services/social/rel"
	"github.com/fencelab/fencelab/services/upload"
	"github.com/fencelab/fencelab/services/workflow"
)

// requestTypes is every JSON request body a route decodes (httpx.Bind →
// httpx.DecodeJSON), so the fuzz target covers each decoder.
var requestTypes = []any{
	points.PostingRequest{}, points.CreateAccountRequest{},
	reserve.ReserveRequest{}, order.CreateRequest{},
	rel.PostRequest{}, rel.ProfileRequest{}, rel.VisibilityRequest{},
	notify.EventRequest{}, notify.PreferencesRequest{}, notify.ResolveRequest{},
	shortlink.CreateRequest{},
	upload.CreateSessionRequest{}, upload.CommitRequest{},
	workflow.StartRequest{},
}

// Seeds: issue 20's probes, as each body would carry them.
var bodySeeds = []string{
	`{"amount":1,"amount":500,"reason":"x"}`, `{"Amount":1}`, `{"amount":"30"}`, `{"amount":1e30}`,
	`{"body":"a\u0000b","visibility":"public"}`, `{"body":"\ud800","visibility":"public"}`,
	`{"user_id":"u","event_key":"k","template":"t","data":{"k\u0000":"v"}}`,
	`{"user_id":"u","event_key":"k","template":"t","data":{"k":"\ud800"}}`,
	`{"business_key":"b","input":{"x":"\u0000"}}`, `{"name":"f","metadata":{"k":"\udfff"}}`,
	`{"action":"give_up","reason":"\u0000"}`, `{"target":"https://x.example:70000/","alias":"CH9"}`,
	`{"target":"https://x.example/","expires_at":"tomorrow"}`, `{"name":"invoice\u202egpj.exe"}`, `{"name":".."}`,
	`{"channels":{"email":true,"email":false}}`, `{"reservation_id":"x"}`, `{"sku":"a","SKU":"b"}`,
	`[]`, `""`, `{`, `{}{}`, "{\"reason\":\"\xff\"}",
	// Issue 36: a body nested 100,000 deep (the probe), far and just past
	// httpx.MaxJSONDepth in free-form data, and at the limit.
	`{"body":` + strings.Repeat(`[`, 100_000) + strings.Repeat(`]`, 100_000) + `,"visibility":"public"}`,
	`{"user_id":"u","event_key":"k","template":"t","data":` + strings.Repeat(`{"a":`, 1000) + `1` + strings.Repeat(`}`, 1000) + `}`,
	`{"business_key":"b","input":` + strings.Repeat(`[`, 64) + strings.Repeat(`]`, 64) + `}`,
	`{"business_key":"b","input":` + strings.Repeat(`[`, 63) + strings.Repeat(`]`, 63) + `}`,
}

// FuzzRequestBodies: no decoder panics; a refusal is a 4xx problem that
// leaks no Go internals; what is accepted holds only storable text.
func FuzzRequestBodies(f *testing.F) {
	for i := range requestTypes {
		for _, s := range bodySeeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		typ := reflect.TypeOf(requestTypes[int(which)%len(requestTypes)])
		v := reflect.New(typ)
		err := httpx.DecodeJSON(body, v.Interface())
		if err != nil {
			p, ok := err.(*httpx.Problem)
			if !ok || p.Status < 400 || p.Status >= 500 {
				t.Fatalf("%s: a refusal must be a 4xx problem, got %v", typ, err)
			}
			for _, leak := range []string{"int64", "json:", "parsing time", "reflect"} {
				if strings.Contains(p.Detail, leak) {
					t.Fatalf("%s: detail leaks %q: %q", typ, leak, p.Detail)
				}
			}
			return
		}
		if strings.Contains(string(body), `\u0000`) {
			t.Fatalf("%s accepted a NUL: %q", typ, body)
		}
		if httpx.TooDeep(body) {
			t.Fatalf("%s accepted a body nested deeper than %d levels", typ, httpx.MaxJSONDepth)
		}
	})
}

// FuzzPathAndQueryParsers: the parsers of path and query values never
// panic, and what they accept is what they claim.
func FuzzPathAndQueryParsers(f *testing.F) {
	for _, s := range []string{"2026-12-01", "tomorrow", "2026-02-30", "0000-01-01", "1", "-1", "x%00y", "x\x00y",
		"\xed\xa0\x80", "https://x.example:70000/", "https://x.example:443/a", "javascript:alert(1)", "CH9", "ch9", "admin",
		"points", "Points", "..", strings.Repeat("9", 40), "v1:12", "!!", "abc_-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := report.ParseDate(s); err == nil && d.Format(report.DateLayout) != s {
			t.Fatalf("ParseDate(%q) accepted a non-canonical date", s)
		}
		if id, ok := httpx.ParseID(s); ok && (id < 1 || strconv.FormatInt(id, 10) != strings.TrimLeft(s, "0")) {
			t.Fatalf("ParseID(%q) = %d", s, id)
		}
		if shortlink.ValidateTarget(s) == nil {
			u, err := url.Parse(s)
			if err != nil || !httpx.CheckText(s) {
				t.Fatalf("ValidateTarget accepted %q", s)
			}
			if p := u.Port(); p != "" {
				if n, err := strconv.Atoi(p); err != nil || n > 65535 {
					t.Fatalf("ValidateTarget accepted port %q", p)
				}
			}
		}
		if shortlink.ValidateAlias(s) == nil && (!httpx.CheckText(s) || strings.EqualFold(s, "admin")) {
			t.Fatalf("ValidateAlias accepted %q", s)
		}
		_, _, _ = rel.DecodeCursor(s)
	})
}
