package console

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSafeNextKeepsRedirectsOnThisSite(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                      "/",
		"/console/queue":        "/console/queue",
		"//evil.example/x":      "/",
		"/\\evil.example":       "/",
		"https://evil.example/": "/",
		"/console/signin?x=1":   "/",
	} {
		require.Equal(t, want, safeNext(in), in)
	}
}

func TestSameOriginRefusesCrossSiteRequests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		headers map[string]string
		ok      bool
	}{
		{map[string]string{}, true}, // no browser headers: the CSRF token decides
		{map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"}, true},
		{map[string]string{"Sec-Fetch-Site": "none"}, true},
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{map[string]string{"Origin": "http://evil.example"}, false},
		{map[string]string{"Origin": "null"}, false},
		{map[string]string{"Origin": "https://example.com"}, false}, // scheme differs
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "http://example.com/console/check", nil)
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		require.Equal(t, c.ok, sameOrigin(r) == "", "%v", c.headers)
	}
}
