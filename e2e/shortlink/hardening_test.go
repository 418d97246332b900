package shortlink_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	shortlinklab "github.com/fencelab/fencelab/lab/shortlink"
	"github.com/fencelab/fencelab/services/shortlink"
)

// Issue 20 item 14: short_url is built on the configured public base URL,
// never on the Host a client sends; one reserved list (module names
// included), compared case-insensitively; aliases are case-insensitive; a
// port above 65535 is a 422; HEAD /s/{code} answers like GET without
// counting a click.
func TestShortLinkRulesFromOutsideProbes(t *testing.T) {
	a := e2etest.StartLab(t, shortlinklab.StartLab, shortlinklab.LabOptions{Settings: map[string]string{
		shortlink.EnvBaseURL: "https://go.example.test",
	}})
	tok := a.UserToken(t, "user-0042")

	r := a.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tok,
		Body:    shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "CH9"},
		Headers: map[string]string{"Host": "evil.example.test"}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var l shortlink.Link
	r.JSON(t, &l)
	require.Equal(t, "ch9", l.Code, "aliases are stored in lower case")
	require.Equal(t, "https://go.example.test/s/ch9", l.ShortURL)

	for _, c := range []struct {
		req    shortlink.CreateRequest
		status int
		code   string
	}{
		{shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "ch9"}, 409, "alias_taken"},
		{shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "Ch9"}, 409, "alias_taken"},
		{shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "points"}, 422, "alias_reserved"},
		{shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "FlashSale"}, 422, "alias_reserved"},
		{shortlink.CreateRequest{Target: "https://book.example.test/", Alias: "Admin"}, 422, "alias_reserved"},
		{shortlink.CreateRequest{Target: "https://book.example.test:70000/"}, 422, "invalid_target"},
		{shortlink.CreateRequest{Target: "https://book.example.test:0/"}, 422, "invalid_target"},
	} {
		r := a.Do(t, lab.Req{Method: "POST", Path: "/shortlink/links", Token: tok, Body: c.req, Invalid: true})
		require.Equal(t, c.status, r.Status, "%+v: %s", c.req, r.Body)
		require.Equal(t, c.code, r.Code(), "%+v", c.req)
	}

	head := a.Do(t, lab.Req{Method: "HEAD", Path: "/s/ch9"})
	require.Equal(t, http.StatusFound, head.Status)
	require.Equal(t, "https://book.example.test/", head.Header.Get("Location"))
	require.Empty(t, head.Body)
	var n int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM shortlink_links`).Scan(&n))
	require.Equal(t, 1, n)
	e2etest.Assert(t, a.Pool, "shortlink")
}
