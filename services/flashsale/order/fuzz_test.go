package order

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/core/httpx"
)

// FuzzParseCallback: the payment callback's decoder (the one body of the
// deployable not decoded by httpx.Bind) never panics, refuses with
// ErrCallbackMalformed only, and never accepts a duplicate key or a NUL.
func FuzzParseCallback(f *testing.F) {
	for _, s := range []string{
		`{"id":"cb-1","type":"effect.succeeded","effect":{"id":"e-1","reference":"order-1","amount":100}}`,
		`{"id":"cb-1","id":"cb-2","type":"effect.succeeded","effect":{"id":"e-1","reference":"order-1"}}`,
		`{"ID":"cb-1","type":"effect.succeeded","effect":{"id":"e-1","reference":"order-1"}}`,
		`{"id":"cb\u0000","type":"effect.succeeded","effect":{"id":"e-1","reference":"order-1"}}`,
		`{"id":"\ud800","type":"effect.failed","effect":{"id":"e-1","reference":"order-1"}}`,
		`{"id":"cb-1","type":"x"}`, `[]`, `{`, ``,
		// Issue 36: nesting far and just past the limit, and at it.
		`{"id":"cb-1","type":"effect.succeeded","effect":` + strings.Repeat(`[`, 100_000) + strings.Repeat(`]`, 100_000) + `}`,
		`{"id":"cb-1","type":"effect.succeeded","effect":{"id":"e-1","reference":"order-1","data":` + strings.Repeat(`{"a":`, 63) + `1` + strings.Repeat(`}`, 63) + `}}`,
		`{"id":"cb-1","type":"effect.succeeded","effect":{"id":"e-1","reference":"order-1","data":` + strings.Repeat(`[`, 62) + strings.Repeat(`]`, 62) + `}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := parseCallback(body)
		if err != nil {
			if !errors.Is(err, errCallbackMalformed) {
				t.Fatalf("parseCallback: %v", err)
			}
			return
		}
		if strings.Contains(string(body), `\u0000`) || strings.Count(string(body), `"id"`) > 2 || httpx.TooDeep(body) {
			t.Fatalf("accepted %q", body)
		}
	})
}
