package httpx_test

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fencelab/fencelab/core/httpx"
)

// The issue 20 cases every decoder is seeded with (the seeds run in
// `go test ./...`; `go test -fuzz` explores from them).
var jsonSeeds = []string{
	`{"amount":1,"amount":500}`, `{"Amount":1}`, `{"amount":1,"AMOUNT":2}`,
	`{"reason":"a\u0000b"}`, `{"reason":"\ud800"}`, `{"reason":"\udc00"}`, `{"reason":"\ud800\u0041"}`,
	`{"reason":"\ud83d\ude00"}`, `{"meta":{"k\u0000":1}}`, `{"meta":{"k":1,"k":2}}`, `{"meta":{"k":1,"K":2}}`,
	`{"at":"tomorrow"}`, `{"at":"2026-12-01T09:30:00Z"}`, `{"amount":"30"}`, `{"amount":1e30}`, `{"amount":30.5}`,
	`[1,2]`, `"x"`, `{"amount":`, `{}{}`, "{\"reason\":\"\xff\"}", `{"items":[{"sku":"a","SKU":"b"}]}`,
	`{"raw":{"a":"\u0000"}}`, `{"raw":[{"a":1,"a":2}]}`, ``, `   `, `null`, `{"reason":"` + strings.Repeat("x", 300) + `"}`,
	// Issue 36: nesting at, just past and far past MaxJSONDepth, brackets
	// inside strings (text, not nesting) and unbalanced brackets.
	`{"meta":` + strings.Repeat(`{"a":`, 62) + `1` + strings.Repeat(`}`, 62) + `}`,
	`{"meta":` + strings.Repeat(`{"a":`, 63) + `1` + strings.Repeat(`}`, 63) + `}`,
	`{"raw":` + strings.Repeat(`[`, 1000) + strings.Repeat(`]`, 1000) + `}`,
	strings.Repeat(`[`, 100_000) + strings.Repeat(`]`, 100_000),
	`{"reason":"` + strings.Repeat(`[{`, 200) + `"}`, `{"meta":{"a":]]]]}}`, `{"items":[[[[[[`,
}

type fuzzBody struct {
	Amount int64           `json:"amount"`
	Reason string          `json:"reason"`
	At     *time.Time      `json:"at"`
	Meta   map[string]any  `json:"meta"`
	Raw    json.RawMessage `json:"raw"`
	Items  []struct {
		SKU string `json:"sku"`
	} `json:"items"`
}

// storable walks v and reports any string PostgreSQL could not store.
func storable(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return httpx.CheckText(v.String())
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || storable(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !storable(v.Field(i)) {
				return false
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage
			var any any
			return v.Len() == 0 || (json.Unmarshal(v.Bytes(), &any) == nil && storable(reflect.ValueOf(&any)) &&
				!strings.Contains(string(v.Bytes()), `\u0000`))
		}
		for i := range v.Len() {
			if !storable(v.Index(i)) {
				return false
			}
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if !storable(k) || !storable(v.MapIndex(k)) {
				return false
			}
		}
	}
	return true
}

// FuzzDecodeJSON: the strict decoder never panics, and whatever it
// accepts holds only storable text and no duplicate keys.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v fuzzBody
		err := httpx.DecodeJSON(body, &v)
		if err != nil {
			p, ok := err.(*httpx.Problem)
			if !ok || p.Status < 400 || p.Status >= 500 {
				t.Fatalf("a refusal must be a 4xx problem, got %v", err)
			}
			if strings.Contains(p.Detail, "int64") || strings.Contains(p.Detail, "json:") {
				t.Fatalf("detail leaks Go internals: %q", p.Detail)
			}
			return
		}
		if !utf8.Valid(body) || !storable(reflect.ValueOf(v)) {
			t.Fatalf("accepted unstorable text: %q", body)
		}
		if httpx.TooDeep(body) {
			t.Fatalf("accepted a body nested deeper than %d levels", httpx.MaxJSONDepth)
		}
		if strings.Count(string(body), `"amount"`) > 1 && !strings.Contains(string(body), `"meta"`) && !strings.Contains(string(body), `"raw"`) {
			t.Fatalf("accepted a duplicate key: %q", body)
		}
	})
}

// FuzzParseID: a path id is accepted only as the canonical decimal of a
// positive int64.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "+5", "007", "1.5", "x", "x\x00y", "99999999999999999999", "9223372036854775807", " 1", "١"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := httpx.ParseID(s)
		if !ok {
			return
		}
		if id < 1 || (strconv.FormatInt(id, 10) != s && strings.TrimLeft(s, "0") != strconv.FormatInt(id, 10)) {
			t.Fatalf("ParseID(%q) = %d", s, id)
		}
	})
}

// FuzzRequestIDAndText: a kept X-Request-Id is short and safe; CheckText
// refuses NUL and invalid UTF-8.
func FuzzRequestIDAndText(f *testing.F) {
	for _, s := range []string{"req-1", `"quoted"`, strings.Repeat("a", 8000), "a b", "x\x00y", "\xed\xa0\x80", "ok.id:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if httpx.ValidRequestID(s) && (len(s) > 64 || strings.ContainsAny(s, "\" \t\r\n;<>\\\x00")) {
			t.Fatalf("unsafe request id kept: %q", s)
		}
		if httpx.CheckText(s) && (!utf8.ValidString(s) || strings.ContainsRune(s, 0)) {
			t.Fatalf("CheckText(%q) accepted unstorable text", s)
		}
	})
}
