package orders_test

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// ORD-01: the channel takes the charge but its answer is lost on the way
// back. The order must neither fail nor give its unit up (ORD-O2): it
// stays PAYING with the unit held. Reconciliation's query first finds the
// charge still pending (nothing changes but that we learn its id), and
// once the payment network has settled it — its callback held back, so
// only the query can tell — makes the order PAID. The held callback,
// arriving last, changes nothing.
func TestORD01ChargeTakenAnswerDroppedStaysPayingReconcileQueryMakesItPaid(t *testing.T) {
	t.Parallel()
	l := start(t, nil)
	tok := l.user(t, "user-0042")
	res := l.reserve(t, tok, sku, "ord01-0042")
	o := l.order(t, tok, res.ID)

	l.pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, DropResponse: true, Times: 1})
	r := l.Do(t, payReq(tok, o.ID))
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	v := l.view(t, tok, o.ID)
	require.Equal(t, order.StatePaying, v.State, "no answer is not a failure (ORD-O2)")
	require.Empty(t, v.EffectID, "the answer naming the charge was lost")
	require.Equal(t, reserve.StateHeld, l.reservation(t, res.ID).State, "no answer never returns the unit (ORD-O2)")
	require.Len(t, v.PaymentEvents, 1)
	require.Equal(t, order.PayUnknown, v.PaymentEvents[0].Status)
	ch := l.charge(t, o) // the channel did take it
	require.Equal(t, fakeprovider.StatusPending, ch.Status)

	out := l.reconcile(t)
	require.Equal(t, map[string]int{"pending": 1}, out.Outcomes)
	v = l.view(t, tok, o.ID)
	require.Equal(t, order.StatePaying, v.State)
	require.Equal(t, ch.ID, v.EffectID, "the query names the charge")

	l.pay.HoldCallbacks()
	require.NoError(t, l.pay.Settle(ch.ID, fakeprovider.StatusSucceeded))
	out = l.reconcile(t)
	require.Equal(t, map[string]int{"paid": 1}, out.Outcomes)

	require.Equal(t, 1, l.pay.ReleaseCallbacks(false))
	l.pay.WaitCallbacks()
	v = l.view(t, tok, o.ID)
	require.Equal(t, order.StatePaid, v.State)
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, applied(v))
	require.Equal(t, []string{"confirm"}, units(v))
	last := v.PaymentEvents[len(v.PaymentEvents)-1]
	require.Equal(t, order.SourceCallback, last.Source, "the late callback is recorded…")
	require.Equal(t, 1, l.count(t, `SELECT count(*) FROM flashsale_order_transition WHERE order_id = $1 AND NOT applied AND event_id = $2`, o.ID, last.ID),
		"…and its move refused")
	require.Equal(t, reserve.StateConfirmed, l.reservation(t, res.ID).State)
	require.Equal(t, 1, l.paidEvents(t, o.ID))
	require.Equal(t, 1, l.pay.Requests(fakeprovider.OpCreate), "one charge request: reconciliation asks, it never charges")
	l.assertSettled(t)
}

// ORD-02: the channel's success callback arrives five times, shuffled
// with a stale failure callback for the same charge, all at once. Each
// order ends PAID through exactly one transition, one confirmation and
// one order_paid event (ORD-O3): duplicates are answered from the inbox,
// and the failure, checked against the channel's query before it could
// cost the unit, turns out to be a success already applied.
func TestORD02SuccessCallbackFiveTimesShuffledWithFailureOneTransitionOneConfirmOneEvent(t *testing.T) {
	t.Parallel()
	l := start(t, nil)
	const rounds = 4
	for i := range rounds {
		sub := "user-00" + itoa(int64(42+i))
		tok := l.user(t, sub)
		res := l.reserve(t, tok, sku, "ord02-"+sub)
		o := l.order(t, tok, res.ID)
		ch := l.payPending(t, tok, o.ID)

		got, restore := l.capture(t)
		require.NoError(t, l.pay.Settle(ch.ID, fakeprovider.StatusSucceeded))
		ds := got()
		restore()
		require.Len(t, ds, 1)
		success := ds[0]
		var cb fakeprovider.Callback
		require.NoError(t, json.Unmarshal(success.body, &cb))

		stale := ch
		stale.Status = fakeprovider.StatusFailed
		failBody, failSig := signedCallback(t, "evt_pay_stale_failure_"+itoa(o.ID), order.CallbackFailed, stale)
		sends := []delivery{{failBody, failSig}}
		for range 5 {
			// A redelivery is signed afresh, as the channel does.
			sends = append(sends, delivery{success.body, fakeprovider.Sign([]byte(secret), time.Now(), success.body)})
		}
		rand.Shuffle(len(sends), func(a, b int) { sends[a], sends[b] = sends[b], sends[a] })

		answers := make([]order.CallbackAnswer, len(sends))
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for k, d := range sends {
			wg.Go(func() {
				<-gate
				r := l.callback(t, d.body, d.signature)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
				r.JSON(t, &answers[k])
			})
		}
		close(gate)
		wg.Wait()

		firsts := 0
		for k, a := range answers {
			require.Equal(t, order.StatePaid, a.State, "every answer sees the order paid")
			if !a.Duplicate {
				firsts++
			}
			if sends[k].signature == failSig {
				require.False(t, a.Duplicate, "the failure is an event of its own")
			}
		}
		require.Equal(t, 2, firsts, "the success applied once, the failure recorded once; four duplicates")

		v := l.view(t, tok, o.ID)
		require.Equal(t, order.StatePaid, v.State)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, applied(v), "one transition")
		require.Equal(t, []string{"confirm"}, units(v), "one confirmation")
		require.Equal(t, 1, l.paidEvents(t, o.ID), "one event")
		require.Equal(t, reserve.StateConfirmed, l.reservation(t, res.ID).State)
		require.Equal(t, 5, l.count(t, `SELECT deliveries FROM flashsale_payment_event WHERE provider_event_id = $1`, cb.ID),
			"every delivery of the success counted on its one inbox row")
		require.Equal(t, 1, l.count(t, `SELECT count(*) FROM flashsale_payment_event
			WHERE order_id = $1 AND source = 'query' AND status = 'succeeded'`, o.ID), "the failure was checked by a query")
	}
	require.Equal(t, rounds, l.pay.Requests(fakeprovider.OpQuery), "one query per failure, none per success")
	l.assertSettled(t)
}

// ORD-03: the payment succeeds after the hold expired and its unit was
// sold to someone else. The money cannot buy a unit, so it goes back
// through the channel, once: the order is REFUNDED, the first refund's
// answer is lost and the refund is asked for again (by reconciliation and
// by the refund job's retry), and the channel's ledger shows one refund.
// The other buyer keeps the unit; the stock invariants hold.
func TestORD03SuccessAfterHoldExpiredAndUnitResoldIsRefundedOnce(t *testing.T) {
	t.Parallel()
	l := start(t, nil)
	l.addSKU(t, "sku-lab-02", 1)
	tok, other := l.user(t, "user-0042"), l.user(t, "user-0043")
	res := l.reserve(t, tok, "sku-lab-02", "ord03-0042")
	o := l.order(t, tok, res.ID)
	ch := l.payPending(t, tok, o.ID)

	l.expireHold(t, res.ID)
	resold := l.reserve(t, other, "sku-lab-02", "ord03-0043")

	l.pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpRefund, DropResponse: true, Times: 1})
	l.settle(t, ch.ID, fakeprovider.StatusSucceeded)
	v := l.view(t, tok, o.ID)
	require.Equal(t, order.StateRefunding, v.State, "charged late, no unit free: the money is owed back")
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID_LATE", "PAID_LATE→REFUNDING"}, applied(v))

	// The refund job's first attempt: the channel refunds, the answer is
	// lost (and the refund's callback held back, so that only our own
	// calls can tell).
	l.pay.HoldCallbacks()
	jobs := l.runRefundJobs(t)
	require.Len(t, jobs, 1)
	require.Equal(t, order.StateRefunding, l.view(t, tok, o.ID).State)
	require.Len(t, l.pay.Refunds(), 1)

	// Reconciliation asks again with the same key: the channel answers with
	// the refund it made.
	require.Equal(t, map[string]int{"refunded": 1}, l.reconcile(t).Outcomes)
	// The job's retry, due now, finds nothing left to do.
	_, err := l.Pool.Exec(t.Context(), `UPDATE job SET due_at = now() WHERE id = $1`, jobs[0].ID)
	require.NoError(t, err)
	require.Len(t, l.runRefundJobs(t), 1)
	j, _, err := l.Deps.Jobs.Get(t.Context(), jobs[0].ID, 0)
	require.NoError(t, err)
	require.Equal(t, claim.StateSucceeded, j.State)
	require.Equal(t, 1, l.pay.ReleaseCallbacks(false), "the refund's callback, last, changes nothing")
	l.pay.WaitCallbacks()

	v = l.view(t, tok, o.ID)
	require.Equal(t, order.StateRefunded, v.State)
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID_LATE", "PAID_LATE→REFUNDING", "REFUNDING→REFUNDED"}, applied(v))
	require.Equal(t, order.Price, v.Charged)
	require.Equal(t, order.Price, v.Refunded)
	require.Empty(t, units(v), "no unit was confirmed for the late money")
	require.Len(t, l.pay.Refunds(), 1, "refunded once")
	require.Equal(t, 2, l.pay.Requests(fakeprovider.OpRefund), "asked twice, with one key")
	require.Equal(t, fakeprovider.StatusRefunded, l.charge(t, o).Status)
	require.Equal(t, 0, l.paidEvents(t, o.ID))
	require.Equal(t, reserve.StateReleased, l.reservation(t, res.ID).State)
	require.Equal(t, reserve.StateHeld, l.reservation(t, resold.ID).State, "the other buyer keeps the unit")
	l.assertSettled(t)
}

// ORD-04: as ORD-03, but nobody bought the released unit: the late money
// retakes it (ORD-O4) and the order is CONFIRMED_LATE, with its one
// order_paid event; nothing is refunded.
func TestORD04SuccessAfterHoldExpiredUnitFreeIsConfirmedLate(t *testing.T) {
	t.Parallel()
	l := start(t, nil)
	l.addSKU(t, "sku-lab-02", 1)
	tok := l.user(t, "user-0042")
	res := l.reserve(t, tok, "sku-lab-02", "ord04-0042")
	o := l.order(t, tok, res.ID)
	ch := l.payPending(t, tok, o.ID)
	l.expireHold(t, res.ID)
	require.Equal(t, 1, l.count(t, `SELECT available FROM flashsale_sku WHERE sku = 'sku-lab-02'`))

	l.pay.DuplicateCallbacks(2)
	l.settle(t, ch.ID, fakeprovider.StatusSucceeded)

	v := l.view(t, tok, o.ID)
	require.Equal(t, order.StateConfirmedLate, v.State)
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID_LATE", "PAID_LATE→CONFIRMED_LATE"}, applied(v))
	require.Equal(t, []string{"retake"}, units(v))
	got := l.reservation(t, res.ID)
	require.Equal(t, reserve.StateConfirmed, got.State)
	require.NotNil(t, got.RetakenAt)
	require.Equal(t, 0, l.count(t, `SELECT available FROM flashsale_sku WHERE sku = 'sku-lab-02'`))
	require.Equal(t, 1, l.paidEvents(t, o.ID))
	require.Empty(t, l.pay.Refunds())
	require.Equal(t, 0, l.count(t, `SELECT count(*) FROM job WHERE kind = $1`, order.RefundKind))
	l.assertSettled(t)
}

// ORD-05: forged and replayed callbacks are refused and change nothing
// (ORD-O5). Before the real success: a body signed with the wrong secret,
// no signature, a signed body altered in transit, a callback signed
// outside the window — each a 401 and not a row written, the order still
// PAYING. After it: the captured callback replayed as is (within the
// window: a redelivery, answered 200 duplicate from the inbox), re-signed
// with an old timestamp (401), and its event id reused for another body
// (409) — nothing changes.
func TestORD05ForgedAndReplayedCallbacksAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	l := start(t, nil)
	tok := l.user(t, "user-0042")
	res := l.reserve(t, tok, sku, "ord05-0042")
	o := l.order(t, tok, res.ID)
	ch := l.payPending(t, tok, o.ID)

	paid := ch
	paid.Status = fakeprovider.StatusSucceeded
	body, sig := signedCallback(t, "evt_pay_forged", order.CallbackSucceeded, paid)
	altered := []byte(string(body[:len(body)-1]) + ` `) // one byte differs
	altered = append(altered, '}')
	stale := fakeprovider.Sign([]byte(secret), time.Now().Add(-10*time.Minute), body)
	before := l.snapshot(t)
	for _, tc := range []struct {
		name      string
		body      []byte
		signature string
		code      string
	}{
		{"wrong secret", body, fakeprovider.Sign([]byte("not-the-channel-secret-0000"), time.Now(), body), "callback_signature_invalid"},
		{"no signature", body, "", "callback_signature_invalid"},
		{"garbage signature", body, "t=abc,v1=00", "callback_signature_invalid"},
		{"body altered after signing", altered, sig, "callback_signature_invalid"},
		{"signed outside the window", body, stale, "callback_signature_stale"},
	} {
		r := l.forgedCallback(t, tc.body, tc.signature)
		require.Equal(t, http.StatusUnauthorized, r.Status, "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.code, r.Code(), tc.name)
	}
	require.Equal(t, before, l.snapshot(t), "forged callbacks change nothing")
	require.Equal(t, order.StatePaying, l.view(t, tok, o.ID).State)

	got, restore := l.capture(t)
	require.NoError(t, l.pay.Settle(ch.ID, fakeprovider.StatusSucceeded))
	real := got()[0]
	restore()
	r := l.callback(t, real.body, real.signature)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var first order.CallbackAnswer
	r.JSON(t, &first)
	require.False(t, first.Duplicate)
	require.Equal(t, order.StatePaid, first.State)

	before = l.snapshot(t)
	r = l.callback(t, real.body, real.signature)
	require.Equal(t, http.StatusOK, r.Status, "a replay inside the window is a redelivery: %s", r.Body)
	var again order.CallbackAnswer
	r.JSON(t, &again)
	require.True(t, again.Duplicate)
	r = l.callback(t, real.body, fakeprovider.Sign([]byte(secret), time.Now().Add(-time.Hour), real.body))
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "callback_signature_stale", r.Code())
	var cb fakeprovider.Callback
	require.NoError(t, json.Unmarshal(real.body, &cb))
	cb.Effect.Status, cb.Type = fakeprovider.StatusFailed, order.CallbackFailed
	other, _ := json.Marshal(cb)
	r = l.callback(t, other, fakeprovider.Sign([]byte(secret), time.Now(), other))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "callback_event_conflict", r.Code())
	require.Equal(t, before, l.snapshot(t), "replays change nothing")
	require.Equal(t, 2, l.count(t, `SELECT deliveries FROM flashsale_payment_event WHERE provider_event_id = $1`, cb.ID),
		"the redelivery is counted on the inbox row, and only there")

	v := l.view(t, tok, o.ID)
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, applied(v))
	require.Equal(t, 1, l.paidEvents(t, o.ID))
	l.assertSettled(t)
}

// ORD-O2 and ORD-O4 together: the charge request reaches the channel
// late, after the pay call has given up waiting (a proxy holds it on the
// way). Reconciliation finds no charge at all and closes the order,
// returning its unit — on the channel's authoritative answer, not a
// guess. Then the charge lands and is paid: money after the order was
// closed, with the unit still free, retakes it (CLOSED → PAID_LATE →
// CONFIRMED_LATE).
func TestORDLateLandingChargeAfterCloseRetakesTheUnit(t *testing.T) {
	t.Parallel()
	slow := newSlowCreates(t)
	l := start(t, map[string]string{order.EnvCallTimeout: "200ms", order.EnvPayURL: slow.URL()})
	slow.to(l.pay.URL())
	tok := l.user(t, "user-0042")
	res := l.reserve(t, tok, sku, "ord-late-0042")
	o := l.order(t, tok, res.ID)

	r := l.Do(t, payReq(tok, o.ID))
	require.Equal(t, http.StatusAccepted, r.Status, "no answer within the timeout: still paying: %s", r.Body)
	require.Empty(t, l.pay.EffectsFor(o.PaymentRef), "the charge is still on its way")
	require.Equal(t, map[string]int{"closed": 1}, l.reconcile(t).Outcomes)
	v := l.view(t, tok, o.ID)
	require.Equal(t, order.StateClosed, v.State)
	require.Equal(t, []string{"release"}, units(v))
	require.Equal(t, reserve.StateReleased, l.reservation(t, res.ID).State)

	slow.land(t)
	l.settle(t, l.charge(t, o).ID, fakeprovider.StatusSucceeded)

	v = l.view(t, tok, o.ID)
	require.Equal(t, order.StateConfirmedLate, v.State)
	require.Equal(t, []string{"CREATED→PAYING", "PAYING→CLOSED", "CLOSED→PAID_LATE", "PAID_LATE→CONFIRMED_LATE"}, applied(v))
	require.Equal(t, []string{"release", "retake"}, units(v))
	require.Equal(t, reserve.StateConfirmed, l.reservation(t, res.ID).State)
	l.assertSettled(t)
}

// A pending charge whose hold ends is closed at the channel first, so it
// can never be paid, and then the order (PAYING → CLOSED, unit back); a
// definite refusal of the charge fails the order at once.
func TestORDReconcileClosesPendingChargeAfterHoldEndsAndRefusalFails(t *testing.T) {
	t.Parallel()
	l := start(t, nil)
	tok, tok2 := l.user(t, "user-0042"), l.user(t, "user-0043")
	res := l.reserve(t, tok, sku, "ord-close-0042")
	o := l.order(t, tok, res.ID)
	ch := l.payPending(t, tok, o.ID)
	_, err := l.Pool.Exec(t.Context(), `UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE id = $1`, res.ID)
	require.NoError(t, err)

	require.Equal(t, map[string]int{"closed": 1}, l.reconcile(t).Outcomes)
	require.Equal(t, fakeprovider.StatusClosed, l.charge(t, o).Status)
	v := l.view(t, tok, o.ID)
	require.Equal(t, order.StateClosed, v.State)
	require.Equal(t, []string{"release"}, units(v))
	require.Equal(t, reserve.StateReleased, l.reservation(t, res.ID).State)
	require.Error(t, l.pay.Settle(ch.ID, fakeprovider.StatusSucceeded), "a closed charge can no longer be paid")

	res2 := l.reserve(t, tok2, sku, "ord-refused-0043")
	o2 := l.order(t, tok2, res2.ID)
	l.pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Status: http.StatusPaymentRequired, Times: 1})
	r := l.Do(t, payReq(tok2, o2.ID))
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	v2 := l.view(t, tok2, o2.ID)
	require.Equal(t, order.StateFailed, v2.State, "the channel refused the charge: a definite failure")
	require.Equal(t, []string{"release"}, units(v2))
	require.Equal(t, reserve.StateReleased, l.reservation(t, res2.ID).State)

	// A 503 is not a refusal of the payment: the order stays PAYING and the
	// query settles it.
	res3 := l.reserve(t, l.user(t, "user-0044"), sku, "ord-503-0044")
	o3 := l.order(t, l.user(t, "user-0044"), res3.ID)
	l.pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Status: http.StatusServiceUnavailable, Times: 1})
	r = l.Do(t, payReq(l.user(t, "user-0044"), o3.ID))
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	require.Equal(t, reserve.StateHeld, l.reservation(t, res3.ID).State)
	require.Equal(t, map[string]int{"closed": 1}, l.reconcile(t).Outcomes, "the channel has no charge: closed on its word")
	l.assertSettled(t)
}
