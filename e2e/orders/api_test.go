package orders_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/e2e/e2etest"
	orders "github.com/fencelab/fencelab/lab/orders"
	"github.com/fencelab/fencelab/services/flashsale"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// The happy path over HTTP: reserve → order (idempotent by key and by
// reservation) → pay (202 PAYING) → the channel settles and calls back →
// GET shows PAID with its moves and the channel's reports; one order_paid
// event.
func TestMain(m *testing.M) { e2etest.Main(m) }

func TestOrderLifecycleOverHTTP(t *testing.T) {
	l := e2etest.StartLab(t, orders.StartLab, e2etest.Options{})
	tok := l.User(t, "user-0042")
	res := l.Reserve(t, tok, flashsale.DemoSKU, "lifecycle-0042")

	key := map[string]string{idem.Header: "order-0042-1"}
	r := l.Do(t, orders.CreateReq(tok, res.ID, key))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var o order.Order
	r.JSON(t, &o)
	require.Equal(t, order.Order{ID: o.ID, ReservationID: res.ID, UserID: "user-0042", SKU: flashsale.DemoSKU, Amount: order.Price,
		State: order.StateCreated, PaymentRef: o.PaymentRef, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt}, o)
	require.True(t, strings.HasPrefix(o.PaymentRef, "fso_"))
	again := l.Do(t, orders.CreateReq(tok, res.ID, key))
	require.Equal(t, http.StatusCreated, again.Status)
	require.Equal(t, "true", again.Header.Get(idem.ReplayedHeader))
	require.Equal(t, r.Body, again.Body, "a retry with the key replays the first answer")
	noKey := l.Do(t, orders.CreateReq(tok, res.ID, nil))
	require.Equal(t, http.StatusOK, noKey.Status, "one order per reservation: the existing one")
	var same order.Order
	noKey.JSON(t, &same)
	require.Equal(t, o.ID, same.ID)

	ch := l.PayPending(t, tok, o.ID)
	l.Settle(t, ch.ID, fakeprovider.StatusSucceeded)

	v := l.View(t, tok, o.ID)
	require.Equal(t, order.StatePaid, v.State)
	require.Equal(t, order.Price, v.Charged)
	require.Equal(t, ch.ID, v.EffectID)
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, orders.Applied(v))
	require.Equal(t, "pay", v.Transitions[0].Cause)
	require.Contains(t, v.Transitions[1].Cause, "callback evt_pay_")
	require.Len(t, v.PaymentEvents, 2)
	require.Equal(t, order.SourceCharge, v.PaymentEvents[0].Source)
	require.Equal(t, order.PayPending, v.PaymentEvents[0].Status)
	cb := v.PaymentEvents[1]
	require.Equal(t, order.SourceCallback, cb.Source)
	require.Equal(t, order.PaySucceeded, cb.Status)
	require.NotNil(t, cb.VerifiedAt, "the callback's signature record")
	require.Equal(t, *v.Transitions[1].EventID, cb.ID)
	require.Equal(t, reserve.StateConfirmed, l.Reservation(t, res.ID).State)
	require.Equal(t, 1, l.PaidEvents(t, o.ID))

	admin := l.Do(t, e2etest.Req{Method: http.MethodGet, Path: "/flashsale/orders/" + fmt.Sprint(o.ID), Token: l.Admin(t)})
	require.Equal(t, http.StatusOK, admin.Status, "an admin may read any order")
	require.Equal(t, map[string]int{}, l.Reconcile(t).Outcomes, "nothing is waiting")
	l.AssertSettled(t)
}

// Bad input: every client mistake is a 4xx problem and changes nothing —
// someone else's reservation or order, paying twice, paying a paid order,
// a callback for an unknown order, a malformed or mismatched callback.
func TestOrderBadInputIs4xxAndChangesNothing(t *testing.T) {
	l := e2etest.StartLab(t, orders.StartLab, e2etest.Options{})
	owner, other := l.User(t, "user-0042"), l.User(t, "user-0043")
	admin := l.Admin(t)
	res := l.Reserve(t, owner, flashsale.DemoSKU, "bad-0042")
	o := l.Order(t, owner, res.ID)
	paid := l.Reserve(t, other, flashsale.DemoSKU, "bad-0043")
	po := l.Order(t, other, paid.ID)
	ch := l.PayPending(t, other, po.ID)
	l.Settle(t, ch.ID, fakeprovider.StatusSucceeded)
	released := l.Reserve(t, l.User(t, "user-0044"), flashsale.DemoSKU, "bad-0044")
	l.ExpireHold(t, released.ID)

	body := func(b string) e2etest.Req {
		return e2etest.Req{Method: http.MethodPost, Path: "/flashsale/orders", Token: owner, Body: b}
	}
	signed := func(e fakeprovider.Effect, typ string) ([]byte, string) {
		return orders.SignedCallback(t, "evt_pay_bad_"+e.Reference+"_"+fmt.Sprint(e.Amount), typ, e)
	}
	unknown := ch
	unknown.Reference, unknown.Key = "fso_nobody", "fso_nobody:charge"
	cbUnknown, sigUnknown := signed(unknown, order.CallbackSucceeded)
	wrongAmount := ch
	wrongAmount.Amount = 1
	cbAmount, sigAmount := signed(wrongAmount, order.CallbackSucceeded)
	malformed := []byte(`{"id":"evt_1","type":"effect.succeeded","effect":`)
	noEffect := []byte(`{"id":"evt_2","type":"effect.succeeded","created":"2030-01-01T00:00:00Z","effect":{}}`)
	oddType := []byte(`{"id":"evt_3","type":"effect.exploded","created":"2030-01-01T00:00:00Z","effect":{"id":"pay_1","reference":"x","status":"succeeded"}}`)
	sign := func(b []byte) string { return fakeprovider.Sign([]byte(orders.LabSecret), time.Now(), b) }
	huge := []byte(`{"id":"` + strings.Repeat("a", order.MaxCallbackBytes) + `"}`)

	before := l.Snapshot(t)
	for _, tc := range []struct {
		name   string
		req    e2etest.Req
		status int
		code   string
	}{
		{"create: no token", e2etest.Req{Method: http.MethodPost, Path: "/flashsale/orders", Body: order.CreateRequest{ReservationID: res.ID}}, 401, "unauthorized"},
		{"create: admin is no buyer", e2etest.Req{Method: http.MethodPost, Path: "/flashsale/orders", Token: admin, Body: order.CreateRequest{ReservationID: res.ID}}, 403, "forbidden"},
		{"create: malformed", body(`{"reservation_id":`), 400, "malformed_json"},
		{"create: unknown field", body(`{"reservation_id":1,"amount":1}`), 400, "unknown_field"},
		{"create: string id", body(`{"reservation_id":"1"}`), 400, "invalid_field"},
		{"create: no id", body(`{}`), 422, "invalid_reservation_id"},
		{"create: unknown reservation", orders.CreateReq(owner, 999999, nil), 404, "reservation_not_found"},
		{"create: someone else's reservation", orders.CreateReq(owner, paid.ID, nil), 403, "forbidden"},
		{"create: someone else's held reservation", orders.CreateReq(other, res.ID, nil), 403, "forbidden"},
		{"create: someone else's reservation, no order yet", orders.CreateReq(owner, released.ID, nil), 403, "forbidden"},
		{"create: released reservation", orders.CreateReq(l.User(t, "user-0044"), released.ID, nil), 409, "reservation_not_held"},
		{"pay: someone else's order", orders.PayReq(other, o.ID), 403, "forbidden"},
		{"pay: admin", orders.PayReq(admin, o.ID), 403, "forbidden"},
		{"pay: unknown order", orders.PayReq(owner, 999999), 404, "order_not_found"},
		{"pay: not an id", e2etest.Req{Method: http.MethodPost, Path: "/flashsale/orders/abc/pay", Token: owner}, 400, "invalid_id"},
		{"pay: a paid order", orders.PayReq(other, po.ID), 409, "order_not_payable"},
		{"get: someone else's order", e2etest.Req{Method: http.MethodGet, Path: "/flashsale/orders/" + fmt.Sprint(po.ID), Token: owner}, 403, "forbidden"},
		{"callback: unknown order", cbReq(cbUnknown, sigUnknown), 404, "callback_order_not_found"},
		{"callback: another amount", cbReq(cbAmount, sigAmount), 422, "payment_mismatch"},
		{"callback: malformed", cbReq(malformed, sign(malformed)), 400, "callback_malformed"},
		{"callback: no effect", cbReq(noEffect, sign(noEffect)), 400, "callback_malformed"},
		{"callback: unknown type", cbReq(oddType, sign(oddType)), 400, "callback_malformed"},
		{"callback: too large", cbReq(huge, sign(huge)), 413, "body_too_large"},
		{"reconcile: a user", e2etest.Req{Method: http.MethodPost, Path: "/flashsale/admin/reconcile", Token: owner}, 403, "forbidden"},
	} {
		tc.req.Invalid = true // bad input on purpose: only the response is checked against the contract
		r := l.Do(t, tc.req)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.code, r.Code(), "%s: %s", tc.name, r.Body)
	}
	require.Equal(t, before, l.Snapshot(t), "no refusal changed anything")

	// Paying twice: the first pay starts the charge, the second is refused
	// and changes nothing.
	l.PayPending(t, owner, o.ID)
	before = l.Snapshot(t)
	r := l.Do(t, orders.PayReq(owner, o.ID))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "payment_in_progress", r.Code())
	require.Equal(t, before, l.Snapshot(t))
	require.Equal(t, 1, len(l.Pay.EffectsFor(o.PaymentRef)))
	e2etest.Assert(t, l.Pool, "flashsale")
}

// A hold that ended before payment started closes the order on pay (409
// hold_ended) and returns the unit if the release job has not yet.
func TestOrderPayAfterHoldEndedClosesTheOrder(t *testing.T) {
	l := e2etest.StartLab(t, orders.StartLab, e2etest.Options{})
	tok := l.User(t, "user-0042")
	res := l.Reserve(t, tok, flashsale.DemoSKU, "ended-0042")
	o := l.Order(t, tok, res.ID)
	_, err := l.Pool.Exec(t.Context(), `UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE id = $1`, res.ID)
	require.NoError(t, err)
	r := l.Do(t, orders.PayReq(tok, o.ID))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "hold_ended", r.Code())
	v := l.View(t, tok, o.ID)
	require.Equal(t, order.StateClosed, v.State)
	require.Equal(t, []string{"CREATED→CLOSED"}, orders.Applied(v))
	require.Equal(t, []string{"release"}, orders.Units(v))
	require.Equal(t, reserve.StateReleased, l.Reservation(t, res.ID).State)
	require.Equal(t, 0, l.Pay.Requests(fakeprovider.OpCreate), "nothing was charged")
	l.AssertSettled(t)
}

func cbReq(body []byte, signature string) e2etest.Req {
	return e2etest.Req{Method: http.MethodPost, Path: order.CallbackPath, Body: body,
		Headers: map[string]string{fakeprovider.SignatureHeader: signature}}
}
