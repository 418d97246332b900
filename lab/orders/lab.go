package orders

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// Experiments are the orders chapter's runnable claims, driven through the
// Lab kit (kit.go) against a real fake payment channel on loopback.
var Experiments = []lab.Experiment{ChargeAnswerLost, SuccessDeliveredFiveTimes, LateSuccessUnitResold,
	LateSuccessUnitFree, ForgedCallbacks, LateLandingCharge, ReconcileCloses}

// ORD-01: the channel takes the charge but its answer is lost on the way
// back. The order must neither fail nor give its unit up (ORD-O2): it
// stays PAYING with the unit held. Reconciliation's query first finds the
// charge still pending (nothing changes but that we learn its id), and
// once the payment network has settled it — its callback held back, so
// only the query can tell — makes the order PAID. The held callback,
// arriving last, changes nothing.
var ChargeAnswerLost = lab.Experiment{
	ID:         "orders/charge-answer-lost",
	Test:       "TestORD01ChargeTakenAnswerDroppedStaysPayingReconcileQueryMakesItPaid",
	Claim:      "the channel takes the charge but its answer is lost: the order stays PAYING with its unit held, and reconciliation's query makes it PAID",
	Invariants: []string{reserve.Module},
	Naive:      "a pay handler that takes no answer for a failure: the charge's answer is lost, so it moves the order PAYING → FAILED on that report and returns the unit — while the channel took the money",
	Catches:    []string{"ORD-O2"},
	Control:    "the same naive pay handler, the charge's answer not lost: it names the charge, the order waits PAYING and reconciliation's query makes it PAID",
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		if x.Naive {
			naiveChargeAnswerLost(x, l)
			return
		}
		tok, res, o := l.Ordered(t, "user-0042", labSKU, "ord01-0042")

		l.Pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, DropResponse: true, Times: 1})
		r := l.Do(t, PayReq(tok, o.ID))
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		v := l.View(t, tok, o.ID)
		require.Equal(t, order.StatePaying, v.State, "no answer is not a failure (ORD-O2)")
		require.Empty(t, v.EffectID, "the answer naming the charge was lost")
		require.Equal(t, reserve.StateHeld, l.Reservation(t, res.ID).State, "no answer never returns the unit (ORD-O2)")
		require.Len(t, v.PaymentEvents, 1)
		require.Equal(t, order.PayUnknown, v.PaymentEvents[0].Status)
		ch := l.Charge(t, o) // the channel did take it
		require.Equal(t, fakeprovider.StatusPending, ch.Status)

		out := l.Reconcile(t)
		require.Equal(t, map[string]int{"pending": 1}, out.Outcomes)
		v = l.View(t, tok, o.ID)
		require.Equal(t, order.StatePaying, v.State)
		require.Equal(t, ch.ID, v.EffectID, "the query names the charge")

		l.Pay.HoldCallbacks()
		require.NoError(t, l.Pay.Settle(ch.ID, fakeprovider.StatusSucceeded))
		out = l.Reconcile(t)
		require.Equal(t, map[string]int{"paid": 1}, out.Outcomes)

		require.Equal(t, 1, l.Pay.ReleaseCallbacks(false))
		l.Pay.WaitCallbacks()
		v = l.View(t, tok, o.ID)
		require.Equal(t, order.StatePaid, v.State)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, Applied(v))
		require.Equal(t, []string{"confirm"}, Units(v))
		last := v.PaymentEvents[len(v.PaymentEvents)-1]
		require.Equal(t, order.SourceCallback, last.Source, "the late callback is recorded…")
		require.Equal(t, 1, l.Count(t, `SELECT count(*) FROM flashsale_order_transition WHERE order_id = $1 AND NOT applied AND event_id = $2`, o.ID, last.ID),
			"…and its move refused")
		require.Equal(t, reserve.StateConfirmed, l.Reservation(t, res.ID).State)
		require.Equal(t, 1, l.PaidEvents(t, o.ID))
		require.Equal(t, 1, l.Pay.Requests(fakeprovider.OpCreate), "one charge request: reconciliation asks, it never charges")
		l.AssertSettled(t)
	},
}

// ORD-02: the channel's success callback arrives five times, shuffled
// with a stale failure callback for the same charge, all at once. Each
// order ends PAID through exactly one transition, one confirmation and
// one order_paid event (ORD-O3): duplicates are answered from the inbox,
// and the failure, checked against the channel's query before it could
// cost the unit, turns out to be a success already applied.
//
// The naive version (naive.go) points the channel's callbacks at a
// handler without the inbox whose move is the product's minus its state
// condition; the channel delivers the one success five times and ORD-O3
// counts the five moves, confirmations and order_paid events those
// deliveries wrote. Its control is the same handler with one delivery.
var SuccessDeliveredFiveTimes = lab.Experiment{
	ID:         "orders/success-delivered-five-times",
	Test:       "TestORD02SuccessCallbackFiveTimesShuffledWithFailureOneTransitionOneConfirmOneEvent",
	Claim:      "a success callback delivered five times, shuffled with a stale failure: one transition, one confirmation, one order_paid event",
	Invariants: []string{reserve.Module},
	Naive:      "a callback handler without its inbox, whose move is not conditional on the state: the channel delivers the success five times and each delivery is applied again",
	Catches:    []string{"ORD-O3", "ORD-O1"},
	Control:    "the same naive handler, the success delivered once",
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		if x.Naive {
			naiveSuccessDeliveries(x, l)
			return
		}
		const rounds = 4
		for i := range rounds {
			sub := "user-00" + itoa(int64(42+i))
			tok, res, o := l.Ordered(t, sub, labSKU, "ord02-"+sub)
			ch := l.PayPending(t, tok, o.ID)

			ds := l.SettleCaptured(t, ch.ID)
			require.Len(t, ds, 1)
			success := ds[0]
			var cb fakeprovider.Callback
			require.NoError(t, json.Unmarshal(success.Body, &cb))

			stale := ch
			stale.Status = fakeprovider.StatusFailed
			failBody, failSig := SignedCallback(t, "evt_pay_stale_failure_"+itoa(o.ID), order.CallbackFailed, stale)
			sends := []Delivery{{failBody, failSig}}
			for range 5 {
				// A redelivery is signed afresh, as the channel does.
				sends = append(sends, Delivery{success.Body, fakeprovider.Sign([]byte(LabSecret), time.Now(), success.Body)})
			}
			rand.Shuffle(len(sends), func(a, b int) { sends[a], sends[b] = sends[b], sends[a] })

			answers := make([]order.CallbackAnswer, len(sends))
			lab.AtOnce(len(sends), func(k int) {
				r := l.Callback(t, sends[k].Body, sends[k].Signature)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
				r.JSON(t, &answers[k])
			})

			firsts := 0
			for k, a := range answers {
				require.Equal(t, order.StatePaid, a.State, "every answer sees the order paid")
				if !a.Duplicate {
					firsts++
				}
				if sends[k].Signature == failSig {
					require.False(t, a.Duplicate, "the failure is an event of its own")
				}
			}
			require.Equal(t, 2, firsts, "the success applied once, the failure recorded once; four duplicates")

			v := l.View(t, tok, o.ID)
			require.Equal(t, order.StatePaid, v.State)
			require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, Applied(v), "one transition")
			require.Equal(t, []string{"confirm"}, Units(v), "one confirmation")
			require.Equal(t, 1, l.PaidEvents(t, o.ID), "one event")
			require.Equal(t, reserve.StateConfirmed, l.Reservation(t, res.ID).State)
			require.Equal(t, 5, l.Count(t, `SELECT deliveries FROM flashsale_payment_event WHERE provider_event_id = $1`, cb.ID),
				"every delivery of the success counted on its one inbox row")
			require.Equal(t, 1, l.Count(t, `SELECT count(*) FROM flashsale_payment_event
				WHERE order_id = $1 AND source = 'query' AND status = 'succeeded'`, o.ID), "the failure was checked by a query")
		}
		require.Equal(t, rounds, l.Pay.Requests(fakeprovider.OpQuery), "one query per failure, none per success")
		l.AssertSettled(t)
	},
}

// ORD-03: the payment succeeds after the hold expired and its unit was
// sold to someone else. The money cannot buy a unit, so it goes back
// through the channel, once: the order is REFUNDED, the first refund's
// answer is lost and the refund is asked for again (by reconciliation and
// by the refund job's retry), and the channel's ledger shows one refund.
// The other buyer keeps the unit; the stock invariants hold.
var LateSuccessUnitResold = lab.Experiment{
	ID:         "orders/late-success-unit-resold",
	Test:       "TestORD03SuccessAfterHoldExpiredAndUnitResoldIsRefundedOnce",
	Claim:      "money that arrives after the hold expired and its unit was resold is refunded exactly once",
	Invariants: []string{reserve.Module},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		l.AddSKU(t, "sku-lab-02", 1)
		tok, res, o := l.Ordered(t, "user-0042", "sku-lab-02", "ord03-0042")
		other := l.User(t, "user-0043")
		ch := l.PayPending(t, tok, o.ID)

		l.ExpireHold(t, res.ID)
		resold := l.Reserve(t, other, "sku-lab-02", "ord03-0043")

		l.Pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpRefund, DropResponse: true, Times: 1})
		l.Settle(t, ch.ID, fakeprovider.StatusSucceeded)
		v := l.View(t, tok, o.ID)
		require.Equal(t, order.StateRefunding, v.State, "charged late, no unit free: the money is owed back")
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID_LATE", "PAID_LATE→REFUNDING"}, Applied(v))

		// The refund job's first attempt: the channel refunds, the answer is
		// lost (and the refund's callback held back, so that only our own
		// calls can tell).
		l.Pay.HoldCallbacks()
		jobs := l.RunRefundJobs(t)
		require.Len(t, jobs, 1)
		require.Equal(t, order.StateRefunding, l.View(t, tok, o.ID).State)
		require.Len(t, l.Pay.Refunds(), 1)

		// Reconciliation asks again with the same key: the channel answers with
		// the refund it made.
		require.Equal(t, map[string]int{"refunded": 1}, l.Reconcile(t).Outcomes)
		// The job's retry, due now, finds nothing left to do.
		_, err := l.Pool.Exec(t.Context(), `UPDATE job SET due_at = now() WHERE id = $1`, jobs[0].ID)
		require.NoError(t, err)
		require.Len(t, l.RunRefundJobs(t), 1)
		j, _, err := l.Jobs.Get(t.Context(), jobs[0].ID, 0)
		require.NoError(t, err)
		require.Equal(t, claim.StateSucceeded, j.State)
		require.Equal(t, 1, l.Pay.ReleaseCallbacks(false), "the refund's callback, last, changes nothing")
		l.Pay.WaitCallbacks()

		v = l.View(t, tok, o.ID)
		require.Equal(t, order.StateRefunded, v.State)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID_LATE", "PAID_LATE→REFUNDING", "REFUNDING→REFUNDED"}, Applied(v))
		require.Equal(t, order.Price, v.Charged)
		require.Equal(t, order.Price, v.Refunded)
		require.Empty(t, Units(v), "no unit was confirmed for the late money")
		require.Len(t, l.Pay.Refunds(), 1, "refunded once")
		require.Equal(t, 2, l.Pay.Requests(fakeprovider.OpRefund), "asked twice, with one key")
		require.Equal(t, fakeprovider.StatusRefunded, l.Charge(t, o).Status)
		require.Equal(t, 0, l.PaidEvents(t, o.ID))
		require.Equal(t, reserve.StateReleased, l.Reservation(t, res.ID).State)
		require.Equal(t, reserve.StateHeld, l.Reservation(t, resold.ID).State, "the other buyer keeps the unit")
		l.AssertSettled(t)
	},
}

// ORD-04: as ORD-03, but nobody bought the released unit: the late money
// retakes it (ORD-O4) and the order is CONFIRMED_LATE, with its one
// order_paid event; nothing is refunded.
var LateSuccessUnitFree = lab.Experiment{
	ID:         "orders/late-success-unit-free",
	Test:       "TestORD04SuccessAfterHoldExpiredUnitFreeIsConfirmedLate",
	Claim:      "money that arrives after the hold expired buys the unit back when nobody took it (CONFIRMED_LATE)",
	Invariants: []string{reserve.Module},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		l.AddSKU(t, "sku-lab-02", 1)
		tok, res, o := l.Ordered(t, "user-0042", "sku-lab-02", "ord04-0042")
		ch := l.PayPending(t, tok, o.ID)
		l.ExpireHold(t, res.ID)
		require.Equal(t, 1, l.Count(t, `SELECT available FROM flashsale_sku WHERE sku = 'sku-lab-02'`))

		l.Pay.DuplicateCallbacks(2)
		l.Settle(t, ch.ID, fakeprovider.StatusSucceeded)

		v := l.View(t, tok, o.ID)
		require.Equal(t, order.StateConfirmedLate, v.State)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID_LATE", "PAID_LATE→CONFIRMED_LATE"}, Applied(v))
		require.Equal(t, []string{"retake"}, Units(v))
		got := l.Reservation(t, res.ID)
		require.Equal(t, reserve.StateConfirmed, got.State)
		require.NotNil(t, got.RetakenAt)
		require.Equal(t, 0, l.Count(t, `SELECT available FROM flashsale_sku WHERE sku = 'sku-lab-02'`))
		require.Equal(t, 1, l.PaidEvents(t, o.ID))
		require.Empty(t, l.Pay.Refunds())
		require.Equal(t, 0, l.Count(t, `SELECT count(*) FROM job_all WHERE kind = $1`, order.RefundKind))
		l.AssertSettled(t)
	},
}

// ORD-05: forged, tampered and stale callbacks are refused and change
// nothing (ORD-O5); a replay is not refused but answered from the inbox.
// The claim says only that: a replay of the captured bytes outside the
// window would need the app's clock moved, so the stale case is shown by
// the same body re-signed with an old timestamp. Before the real success: a body signed with the wrong secret,
// no signature, a signed body altered in transit, a callback signed
// outside the window — each a 401 and not a row written, the order still
// PAYING. After it: the captured callback replayed as is (within the
// window: a redelivery, answered 200 duplicate from the inbox), re-signed
// with an old timestamp (401), and its event id reused for another body
// (409) — nothing changes.
var ForgedCallbacks = lab.Experiment{
	ID:         "orders/forged-callbacks",
	Test:       "TestORD05ForgedAndReplayedCallbacksAreRefusedAndChangeNothing",
	Claim:      "forged, tampered and stale-signed callbacks are refused; a replay inside the signing window is answered as a duplicate, and an event id reused for another body is refused: none changes anything",
	Invariants: []string{reserve.Module},
	NoNaive:    "a callback without its signature check would accept anything: the experiment is the refusal itself, not a race",
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		tok, _, o := l.Ordered(t, "user-0042", labSKU, "ord05-0042")
		ch := l.PayPending(t, tok, o.ID)

		paid := ch
		paid.Status = fakeprovider.StatusSucceeded
		body, sig := SignedCallback(t, "evt_pay_forged", order.CallbackSucceeded, paid)
		altered := []byte(string(body[:len(body)-1]) + ` `) // one byte differs
		altered = append(altered, '}')
		stale := fakeprovider.Sign([]byte(LabSecret), time.Now().Add(-10*time.Minute), body)
		before := l.Snapshot(t)
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
			r := l.ForgedCallback(t, tc.body, tc.signature)
			require.Equal(t, http.StatusUnauthorized, r.Status, "%s: %s", tc.name, r.Body)
			require.Equal(t, tc.code, r.Code(), tc.name)
		}
		require.Equal(t, before, l.Snapshot(t), "forged callbacks change nothing")
		require.Equal(t, order.StatePaying, l.View(t, tok, o.ID).State)

		real := l.SettleCaptured(t, ch.ID)[0]
		r := l.Callback(t, real.Body, real.Signature)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var first order.CallbackAnswer
		r.JSON(t, &first)
		require.False(t, first.Duplicate)
		require.Equal(t, order.StatePaid, first.State)

		before = l.Snapshot(t)
		r = l.Callback(t, real.Body, real.Signature)
		require.Equal(t, http.StatusOK, r.Status, "a replay inside the window is a redelivery: %s", r.Body)
		var again order.CallbackAnswer
		r.JSON(t, &again)
		require.True(t, again.Duplicate)
		r = l.Callback(t, real.Body, fakeprovider.Sign([]byte(LabSecret), time.Now().Add(-time.Hour), real.Body))
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Equal(t, "callback_signature_stale", r.Code())
		var cb fakeprovider.Callback
		require.NoError(t, json.Unmarshal(real.Body, &cb))
		cb.Effect.Status, cb.Type = fakeprovider.StatusFailed, order.CallbackFailed
		other, _ := json.Marshal(cb)
		r = l.Callback(t, other, fakeprovider.Sign([]byte(LabSecret), time.Now(), other))
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		require.Equal(t, "callback_event_conflict", r.Code())
		require.Equal(t, before, l.Snapshot(t), "replays change nothing")
		require.Equal(t, 2, l.Count(t, `SELECT deliveries FROM flashsale_payment_event WHERE provider_event_id = $1`, cb.ID),
			"the redelivery is counted on the inbox row, and only there")

		v := l.View(t, tok, o.ID)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→PAID"}, Applied(v))
		require.Equal(t, 1, l.PaidEvents(t, o.ID))
		l.AssertSettled(t)
	},
}

// ORD-O2 and ORD-O4 together: the charge requests of two orders reach the
// channel late, after the pay calls have given up waiting (a proxy holds
// them on the way). Reconciliation finds no charge at all and closes both
// orders, returning their units — on the channel's authoritative answer,
// not a guess. Then the charges land and are paid: money after the order
// was closed. The first order's unit is still free, so the money retakes
// it (CLOSED → PAID_LATE → CONFIRMED_LATE); the second's was sold to
// another buyer meanwhile, so the money is refunded, once (PAID_LATE →
// REFUNDING → REFUNDED). The channel counts one charge request per order
// and one refund.
var LateLandingCharge = lab.Experiment{
	ID:         "orders/late-landing-charge",
	Test:       "TestORDLateLandingChargeAfterCloseRetakesTheUnit",
	Claim:      "a charge that lands after reconciliation closed its order retakes the unit when it is free and is refunded once when it was resold; one charge request per order",
	Invariants: []string{reserve.Module},
	Run: func(x *lab.X) {
		t := x
		slow := NewSlowCreates(t)
		l := StartLab(x, lab.Options{Settings: map[string]string{order.EnvCallTimeout: "200ms", order.EnvPayURL: slow.URL()}})
		slow.To(l.Pay.URL())
		l.AddSKU(t, "sku-lab-02", 1)
		tok, res, o := l.Ordered(t, "user-0042", labSKU, "ord-late-0042")
		tok2, res2, o2 := l.Ordered(t, "user-0043", "sku-lab-02", "ord-late-0043")
		other := l.User(t, "user-0044")

		for _, p := range []struct {
			tok string
			o   order.Order
		}{{tok, o}, {tok2, o2}} {
			r := l.Do(t, PayReq(p.tok, p.o.ID))
			require.Equal(t, http.StatusAccepted, r.Status, "no answer within the timeout: still paying: %s", r.Body)
			require.Empty(t, l.Pay.EffectsFor(p.o.PaymentRef), "the charge is still on its way")
			x.Step(lab.Step{Actor: "buyer", Action: fmt.Sprintf("pay order %d", p.o.ID), Outcome: string(order.StatePaying),
				Note: "the charge request is held on the way; the pay call gave up waiting"})
		}
		require.Equal(t, map[string]int{"closed": 2}, l.Reconcile(t).Outcomes)
		for _, p := range []struct {
			tok string
			o   order.Order
			res int64
		}{{tok, o, res.ID}, {tok2, o2, res2.ID}} {
			v := l.View(t, p.tok, p.o.ID)
			require.Equal(t, order.StateClosed, v.State)
			require.Equal(t, []string{"release"}, Units(v))
			require.Equal(t, reserve.StateReleased, l.Reservation(t, p.res).State)
		}
		resold := l.Reserve(t, other, "sku-lab-02", "ord-late-0044") // the second order's unit, sold again

		slow.Land(t)
		l.Settle(t, l.Charge(t, o).ID, fakeprovider.StatusSucceeded)
		l.Settle(t, l.Charge(t, o2).ID, fakeprovider.StatusSucceeded)

		v := l.View(t, tok, o.ID)
		require.Equal(t, order.StateConfirmedLate, v.State)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→CLOSED", "CLOSED→PAID_LATE", "PAID_LATE→CONFIRMED_LATE"}, Applied(v))
		require.Equal(t, []string{"release", "retake"}, Units(v))
		require.Equal(t, reserve.StateConfirmed, l.Reservation(t, res.ID).State)

		// The refund branch: no unit to retake, the money is owed back.
		v2 := l.View(t, tok2, o2.ID)
		require.Equal(t, order.StateRefunding, v2.State, "charged late, the unit resold: the money is owed back")
		jobs := l.RunRefundJobs(t)
		require.Len(t, jobs, 1)
		l.Pay.WaitCallbacks()
		v2 = l.View(t, tok2, o2.ID)
		require.Equal(t, order.StateRefunded, v2.State)
		require.Equal(t, []string{"CREATED→PAYING", "PAYING→CLOSED", "CLOSED→PAID_LATE", "PAID_LATE→REFUNDING", "REFUNDING→REFUNDED"}, Applied(v2))
		require.Equal(t, []string{"release"}, Units(v2), "no unit was confirmed for the late money")
		require.Equal(t, order.Price, v2.Charged)
		require.Equal(t, order.Price, v2.Refunded)
		require.Equal(t, reserve.StateHeld, l.Reservation(t, resold.ID).State, "the other buyer keeps the unit")
		require.Equal(t, fakeprovider.StatusRefunded, l.Charge(t, o2).Status)

		// Never charged twice, counted at the channel: one charge request per
		// order reached it (l.Charge checks one charge in its ledger per
		// order), and one refund was asked for and made.
		creates, refundReqs, refunds := l.Pay.Requests(fakeprovider.OpCreate), l.Pay.Requests(fakeprovider.OpRefund), len(l.Pay.Refunds())
		x.Step(lab.Step{Actor: "channel", Action: "count requests", Note: fmt.Sprintf("%d charge requests for 2 orders, %d refund requests, %d refunds", creates, refundReqs, refunds)})
		x.Figure("charge_requests", creates)
		x.Figure("refunds", refunds)
		require.Equal(t, 2, creates, "one charge request per order")
		require.Equal(t, 1, refundReqs, "one refund request")
		require.Equal(t, 1, refunds, "refunded once")
		l.AssertSettled(t)
	},
}

// A pending charge whose hold ends is closed at the channel first, so it
// can never be paid, and then the order (PAYING → CLOSED, unit back); a
// definite refusal of the charge fails the order at once.
var ReconcileCloses = lab.Experiment{
	ID:         "orders/reconcile-closes",
	Test:       "TestORDReconcileClosesPendingChargeAfterHoldEndsAndRefusalFails",
	Claim:      "reconciliation closes a pending charge once the hold ended; a charge the channel refuses fails the order and returns the unit",
	Invariants: []string{reserve.Module},
	Run: func(x *lab.X) {
		t := x
		l := StartLab(x, lab.Options{})
		tok, res, o := l.Ordered(t, "user-0042", labSKU, "ord-close-0042")
		ch := l.PayPending(t, tok, o.ID)
		_, err := l.Pool.Exec(t.Context(), `UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE id = $1`, res.ID)
		require.NoError(t, err)

		require.Equal(t, map[string]int{"closed": 1}, l.Reconcile(t).Outcomes)
		require.Equal(t, fakeprovider.StatusClosed, l.Charge(t, o).Status)
		v := l.View(t, tok, o.ID)
		require.Equal(t, order.StateClosed, v.State)
		require.Equal(t, []string{"release"}, Units(v))
		require.Equal(t, reserve.StateReleased, l.Reservation(t, res.ID).State)
		require.Error(t, l.Pay.Settle(ch.ID, fakeprovider.StatusSucceeded), "a closed charge can no longer be paid")

		tok2, res2, o2 := l.Ordered(t, "user-0043", labSKU, "ord-refused-0043")
		l.Pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Status: http.StatusPaymentRequired, Times: 1})
		r := l.Do(t, PayReq(tok2, o2.ID))
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		v2 := l.View(t, tok2, o2.ID)
		require.Equal(t, order.StateFailed, v2.State, "the channel refused the charge: a definite failure")
		require.Equal(t, []string{"release"}, Units(v2))
		require.Equal(t, reserve.StateReleased, l.Reservation(t, res2.ID).State)

		// A 503 is not a refusal of the payment: the order stays PAYING and the
		// query settles it.
		tok3, res3, o3 := l.Ordered(t, "user-0044", labSKU, "ord-503-0044")
		l.Pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Status: http.StatusServiceUnavailable, Times: 1})
		r = l.Do(t, PayReq(tok3, o3.ID))
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		require.Equal(t, reserve.StateHeld, l.Reservation(t, res3.ID).State)
		require.Equal(t, map[string]int{"closed": 1}, l.Reconcile(t).Outcomes, "the channel has no charge: closed on its word")
		l.AssertSettled(t)
	},
}
