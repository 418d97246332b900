package order

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/core/claim"
)

// Reconcile asks the channel about every order that has waited longer
// than ReconcileAfter in PAYING or REFUNDING (at most ReconcileBatch of
// each) and applies the answers. It is the periodic ReconcileKind job and
// POST /flashsale/admin/reconcile. Concurrent runs are harmless: queries
// and closes change nothing twice, refunds carry the order's key, and
// every move is conditional.
//
// For a PAYING order the channel's answer decides (ORD-O2): charged →
// PAID (or the late path); failed → FAILED; closed or no charge at all →
// CLOSED; still pending → nothing while the hold stands, and once it has
// ended the charge is closed at the channel first, so that it can never
// be paid, and then the order; no answer → nothing, ask again next run.
// A REFUNDING order's refund is sent again with its key.
func (s *Service) Reconcile(ctx context.Context) (ReconcileResult, error) {
	res := ReconcileResult{Outcomes: map[string]int{}}
	ws, err := waitingOrders(ctx, s.pool, s.cfg.ReconcileAfter, s.cfg.ReconcileBatch)
	if err != nil {
		return res, err
	}
	for _, w := range ws {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var outcome string
		if w.state == StateRefunding {
			outcome, err = s.refund(ctx, w.id)
		} else {
			outcome, err = s.reconcilePaying(ctx, w)
		}
		if err != nil {
			s.log.Warn("flashsale: reconcile order", "order", w.id, "state", w.state, "err", err)
			outcome = "error"
		}
		res.Checked++
		res.Outcomes[outcome]++
	}
	return res, nil
}

func (s *Service) reconcilePaying(ctx context.Context, w waiting) (string, error) {
	o, err := getOrder(ctx, s.pool, w.id)
	if err != nil || o.State != StatePaying {
		return "no_change", err
	}
	ev := s.ask(ctx, o.PaymentRef, o.ChargeKey())
	switch {
	case ev.Status == PayUnknown:
		return "unanswered", nil
	case ev.Status == PayPending && w.holdLive:
		if o.EffectID == "" {
			// The pay answer was lost: at least learn the charge's id.
			_, err := s.record(ctx, o.ID, ev, "reconcile")
			return "pending", err
		}
		return "pending", nil
	case ev.Status == PayPending:
		if ev = s.close(ctx, o, ev.EffectID); ev.Status == PayUnknown || ev.Status == PayPending {
			return "unanswered", nil
		}
	}
	after, err := s.record(ctx, o.ID, ev, "reconcile")
	if err != nil {
		return "", err
	}
	return outcome(o.State, after.State), nil
}

// close closes an unpaid charge at the channel and returns the report to
// apply: closed, or — if the charge settled before the close reached it —
// what the channel's query says it became.
func (s *Service) close(ctx context.Context, o Order, effectID string) paymentEvent {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
	e, err := s.channel.Close(callCtx, effectID)
	cancel()
	switch {
	case err == nil:
		s.m.calls.WithLabelValues("close", e.Status).Inc()
		return paymentEvent{Source: sourceClose, Status: e.Status, EffectID: e.ID, Amount: &e.Amount}
	case settledMeanwhile(err):
		s.m.calls.WithLabelValues("close", "settled").Inc()
		return s.ask(ctx, o.PaymentRef, o.ChargeKey())
	}
	s.m.calls.WithLabelValues("close", PayUnknown).Inc()
	return paymentEvent{Source: sourceClose, Status: PayUnknown, Detail: err.Error()}
}

// refund asks the channel to refund a REFUNDING order, always with the
// order's refund key and amount: however often it runs, by the refund job
// or by reconciliation, the channel makes one refund (ORD-O4). The
// order becomes REFUNDED when the channel reports it.
func (s *Service) refund(ctx context.Context, id int64) (string, error) {
	o, err := getOrder(ctx, s.pool, id)
	if err != nil || o.State != StateRefunding {
		return "no_change", err
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
	rf, err := s.channel.Refund(callCtx, o.EffectID, o.Amount, o.refundKey())
	cancel()
	var ev paymentEvent
	switch {
	case err == nil:
		ev = paymentEvent{Source: sourceRefund, Status: payRefunded, EffectID: o.EffectID, Refunded: &rf.Amount, Detail: "refund " + rf.ID}
	case settledMeanwhile(err):
		// Refused as already refunded (or not refundable): the channel's
		// query says which.
		if ev = s.ask(ctx, o.PaymentRef, o.ChargeKey()); ev.Status != payRefunded {
			return "unanswered", fmt.Errorf("flashsale: refund of order %d refused (%v); the charge is %s", o.ID, err, ev.Status)
		}
	default:
		s.m.calls.WithLabelValues("refund", PayUnknown).Inc()
		return "unanswered", fmt.Errorf("flashsale: refund of order %d: %w", o.ID, err)
	}
	s.m.calls.WithLabelValues("refund", ev.Status).Inc()
	after, err := s.record(ctx, o.ID, ev, "refund")
	if err != nil {
		return "", err
	}
	return outcome(o.State, after.State), nil
}

// reconcileJob is the periodic ReconcileKind job.
func (s *Service) reconcileJob(ctx context.Context, j *claim.Job) error {
	res, err := s.Reconcile(ctx)
	if err != nil {
		return err
	}
	if res.Checked > 0 {
		s.log.Info("flashsale: reconciled orders", "checked", res.Checked, "outcomes", res.Outcomes)
	}
	return j.SetResult(res)
}

// refundJob is one RefundKind job. An error (no answer, the channel
// unavailable) retries it after backoff with the same refund key.
func (s *Service) refundJob(ctx context.Context, j *claim.Job) error {
	var p refundPayload
	if err := j.UnmarshalPayload(&p); err != nil || p.OrderID <= 0 {
		return claim.Permanent(fmt.Errorf("flashsale: refund job %d: bad payload %s", j.ID, j.Payload))
	}
	out, err := s.refund(ctx, p.OrderID)
	if err != nil {
		return err
	}
	return j.SetResult(map[string]string{"outcome": out})
}

// outcome names what a reconciliation step did to an order.
func outcome(before, after State) string {
	if before == after {
		return "no_change"
	}
	return strings.ToLower(string(after))
}
