package e2etest

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
)

// exchange builds a synthetic debit exchange; the check needs no server.
func exchange(t testing.TB, tok string, reqBody string, status int, contentType, respBody string) lab.Exchange {
	t.Helper()
	req, err := http.NewRequest("POST", "http://127.0.0.1:1/points/accounts/acct-0042/debits", bytes.NewReader([]byte(reqBody)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Set("Authorization", "Bearer "+tok)
	h := http.Header{}
	h.Set("Content-Type", contentType)
	return lab.Exchange{Req: lab.Req{Method: "POST", Path: req.URL.Path}, Request: req, Body: []byte(reqBody),
		Response: lab.Response{Status: status, Header: h, Body: []byte(respBody)}}
}

const (
	goodDebit = `{"amount":30,"reason":"prize-17"}`
	goodTxn   = `{"id":3,"kind":"debit","account_id":"acct-0042","amount":30,"reason":"prize-17","balance":970,"version":2,` +
		`"entries":[{"account_id":"acct-0042","amount":-30},{"account_id":"sys:redemption","amount":30}],"created_at":"2026-12-01T12:00:00Z"}`
	problem = `{"type":"urn:fencelab:problem:%s","title":"Conflict","status":409,"code":"%s","instance":"/points/accounts/acct-0042/debits"}`
)

// TestTheContractCheckCatchesDrift: the check passes a documented exchange
// and fails each kind of drift the e2e suites rely on it to catch — a
// status, a field, a problem code, a request, a role the document does
// not list. A check that cannot fail would prove nothing.
func TestTheContractCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	auth, err := httpx.NewAuth([]byte(Secret))
	require.NoError(t, err)
	app := &lab.App{Auth: auth}
	user, err := auth.Mint("user-0042", httpx.RoleUser, time.Hour)
	require.NoError(t, err)
	admin, err := auth.Mint("admin-1", httpx.RoleAdmin, time.Hour)
	require.NoError(t, err)
	check := checkContract(app)

	require.NoError(t, check(exchange(t, user, goodDebit, 201, "application/json", goodTxn)))
	require.NoError(t, check(exchange(t, user, goodDebit, 409, httpx.ProblemContentType,
		`{"type":"urn:fencelab:problem:insufficient_balance","title":"Conflict","status":409,"code":"insufficient_balance","instance":"/x"}`)))

	for name, x := range map[string]lab.Exchange{
		"undocumented status": exchange(t, user, goodDebit, 418, "application/json", goodTxn),
		"undocumented field":  exchange(t, user, goodDebit, 201, "application/json", goodTxn[:len(goodTxn)-1]+`,"secret":1}`),
		"missing field":       exchange(t, user, goodDebit, 201, "application/json", `{"id":3}`),
		"undocumented code": exchange(t, user, goodDebit, 409, httpx.ProblemContentType,
			`{"type":"urn:fencelab:problem:teapot","title":"Conflict","status":409,"code":"teapot","instance":"/x"}`),
		"wrong media type":             exchange(t, user, goodDebit, 201, "text/plain", goodTxn),
		"request out of bounds":        exchange(t, user, `{"amount":0,"reason":"prize-17"}`, 422, httpx.ProblemContentType, `{}`),
		"role the route does not list": exchange(t, admin, goodDebit, 201, "application/json", goodTxn),
	} {
		require.Error(t, check(x), name)
	}

	bad := exchange(t, user, `{"amount":0,"reason":"prize-17"}`, 422, httpx.ProblemContentType,
		`{"type":"urn:fencelab:problem:invalid_amount","title":"Unprocessable Entity","status":422,"code":"invalid_amount","instance":"/x"}`)
	bad.Req.Invalid = true
	require.NoError(t, check(bad), "a request marked Invalid is sent as it is; its documented answer passes")
}

// BenchmarkContractCheck is the cost the check adds to each e2e exchange
// (request and response validated; the router is built once per process).
func BenchmarkContractCheck(b *testing.B) {
	auth, err := httpx.NewAuth([]byte(Secret))
	require.NoError(b, err)
	check := checkContract(&lab.App{Auth: auth})
	user, err := auth.Mint("user-0042", httpx.RoleUser, time.Hour)
	require.NoError(b, err)
	x := exchange(b, user, goodDebit, 201, "application/json", goodTxn)
	require.NoError(b, check(x))
	b.ResetTimer()
	for b.Loop() {
		if err := check(x); err != nil {
			b.Fatal(err)
		}
	}
}
