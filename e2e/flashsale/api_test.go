package flashsale_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// The happy path over HTTP: a hold, its owner reads it, the stock shows it,
// and the dev seed is idempotent.
func TestReservationLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	a := start(t, nil)
	seed(t, a) // a second seed changes nothing
	tok := userToken(t, a, "user-0042")

	r := a.Do(t, reserveReq(tok, sku, "lifecycle-0042"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	held := decode(t, r)
	require.Equal(t, reserve.StateHeld, held.State)
	require.Equal(t, "user-0042", held.UserID)
	require.Equal(t, "/flashsale/reservations/"+itoa(held.ID), r.Header.Get("Location"))
	require.WithinDuration(t, held.CreatedAt.Add(reserve.DefaultHoldTTL), held.ExpiresAt, 0)

	got := a.Do(t, getReq(tok, held.ID))
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	require.Equal(t, held, decode(t, got))
	admin := a.Do(t, getReq(a.Token(t, "admin-0001", httpx.RoleAdmin), held.ID))
	require.Equal(t, http.StatusOK, admin.Status, "an admin may read any reservation")

	require.Equal(t, reserve.Stock{SKU: sku, Stock: 40, Available: 39, Held: 1}, stock(t, a, sku))
	adm := a.Do(t, e2etest.Req{Method: http.MethodGet, Path: "/flashsale/admin/admission", Token: a.Token(t, "admin-0001", httpx.RoleAdmin)})
	require.Equal(t, http.StatusOK, adm.Status)
	var st reserve.Admission
	adm.JSON(t, &st)
	require.Equal(t, reserve.Admission{Limit: 8, WaitLine: 16, PeakInDB: 1}, st)
	e2etest.Assert(t, a.Pool, "flashsale")
}

// Bad input: every client mistake is a 4xx problem and writes nothing.
func TestBadInputIs4xxAndWritesNothing(t *testing.T) {
	t.Parallel()
	a := start(t, nil)
	owner, other := userToken(t, a, "user-0042"), userToken(t, a, "user-0043")
	admin := a.Token(t, "admin-0001", httpx.RoleAdmin)
	mine := decode(t, a.Do(t, reserveReq(owner, sku, "bad-input-0042")))
	post := func(tok, body string, headers map[string]string) e2etest.Req {
		return e2etest.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok, Body: body, Headers: headers}
	}

	for _, tc := range []struct {
		name   string
		req    e2etest.Req
		status int
		code   string
	}{
		{"unknown sku", reserveReq(other, "sku-lab-99", "bad-1"), 404, "unknown_sku"},
		{"malformed sku", reserveReq(other, "SKU LAB 01", "bad-2"), 422, "invalid_sku"},
		{"empty sku", reserveReq(other, "", "bad-3"), 422, "invalid_sku"},
		{"over-long sku", reserveReq(other, strings.Repeat("s", 65), "bad-4"), 422, "invalid_sku"},
		{"empty request key", reserveReq(other, sku, ""), 422, "request_key_missing"},
		{"over-long request key", reserveReq(other, sku, strings.Repeat("k", 256)), 422, "invalid_request_key"},
		{"request key with a space", reserveReq(other, sku, "bad 5"), 422, "invalid_request_key"},
		{"request key not ASCII", reserveReq(other, sku, "bad-ключ"), 422, "invalid_request_key"},
		{"body and header keys differ", post(other, `{"sku":"sku-lab-01","request_key":"bad-6"}`, map[string]string{idem.Header: "bad-7"}), 422, "request_key_mismatch"},
		{"malformed header key", post(other, `{"sku":"sku-lab-01"}`, map[string]string{idem.Header: "bad 8"}), 422, "invalid_request_key"},
		{"unknown field", post(other, `{"sku":"sku-lab-01","request_key":"bad-9","user_id":"user-0042"}`, nil), 400, "unknown_field"},
		{"wrong type", post(other, `{"sku":1,"request_key":"bad-10"}`, nil), 400, "invalid_field"},
		{"malformed json", post(other, `{"sku":`, nil), 400, "malformed_json"},
		{"no token", reserveReq("", sku, "bad-11"), 401, "unauthorized"},
		{"forged token", reserveReq("not-a-token", sku, "bad-12"), 401, "unauthorized"},
		{"admin cannot reserve", reserveReq(admin, sku, "bad-13"), 403, "forbidden"},
		{"another user's reservation", getReq(other, mine.ID), 403, "forbidden"},
		{"unknown reservation", getReq(owner, 999999), 404, "reservation_not_found"},
		{"non-numeric reservation id", e2etest.Req{Method: http.MethodGet, Path: "/flashsale/reservations/abc", Token: owner}, 400, "invalid_id"},
		{"reservation without token", getReq("", mine.ID), 401, "unauthorized"},
		{"stock of unknown sku", e2etest.Req{Method: http.MethodGet, Path: "/flashsale/skus/sku-lab-99"}, 404, "unknown_sku"},
		{"stock of malformed sku", e2etest.Req{Method: http.MethodGet, Path: "/flashsale/skus/%20x"}, 404, "unknown_sku"},
		{"user runs the release", e2etest.Req{Method: http.MethodPost, Path: "/flashsale/admin/release-expired", Token: owner}, 403, "forbidden"},
		{"user reads admission", e2etest.Req{Method: http.MethodGet, Path: "/flashsale/admin/admission", Token: owner}, 403, "forbidden"},
	} {
		tc.req.Invalid = true // bad input on purpose: only the response is checked against the contract
		r := a.Do(t, tc.req)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.code, r.Code(), tc.name)
		require.Equal(t, httpx.ProblemContentType, r.Header.Get("Content-Type"), tc.name)
	}

	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM flashsale_reservation`))
	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM flashsale_stock_move`))
	require.Equal(t, reserve.Stock{SKU: sku, Stock: 40, Available: 39, Held: 1}, stock(t, a, sku))
	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM flashsale_sku`))
	e2etest.Assert(t, a.Pool, "flashsale")
}
