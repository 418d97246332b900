package order

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// TopicOrderPaid is the outbox topic of paid orders: one event per order
// whose unit is confirmed, PAID or CONFIRMED_LATE (ORD-O3).
const TopicOrderPaid = "flashsale.order_paid"

// PaidEvent is the payload of a TopicOrderPaid event (key: the order id).
type PaidEvent struct {
	OrderID       int64  `json:"order_id"`
	ReservationID int64  `json:"reservation_id"`
	UserID        string `json:"user_id"`
	SKU           string `json:"sku"`
	Amount        int64  `json:"amount"`
	EffectID      string `json:"effect_id"`
	// Late: the payment arrived after the hold was released and a free
	// unit was retaken (ORD-O4).
	Late bool `json:"late"`
}

// apply makes an order follow one report of the channel. It runs inside
// tx with the order row locked (o is what the lock read) and ev already
// recorded; it returns the order's state afterwards.
//
// Every report may arrive any number of times, in any order, from any of
// its sources (the pay answer, callbacks, reconciliation's query): each
// move is conditional on the state the success or failure applies to, so
// a repeat finds the order moved on and is refused — logged, and nothing
// else changes (ORD-O1, ORD-O3).
func (s *Service) apply(ctx context.Context, tx pgx.Tx, o Order, ev paymentEvent, cause string) (State, error) {
	switch {
	case ev.Status == payRefunded && (o.State == StateRefunding || o.State == StateRefunded):
		return s.applyRefund(ctx, tx, o, ev, cause)
	case ev.charged():
		return s.applyCharge(ctx, tx, o, ev, cause)
	case ev.Status == PayPending:
		if o.EffectID == "" && ev.EffectID != "" {
			return o.State, learnEffect(ctx, tx, o.ID, ev.EffectID)
		}
		return o.State, nil
	case ev.Status == payFailed || ev.Status == payRejected:
		return s.giveUp(ctx, tx, o, StateFailed, ev, cause)
	case ev.Status == payClosed || ev.Status == payNone:
		return s.giveUp(ctx, tx, o, StateClosed, ev, cause)
	}
	// unknown, unavailable: no definite answer, so nothing changes and
	// the unit stays held (ORD-O2); reconciliation asks again.
	return o.State, nil
}

// giveUp ends a PAYING order whose charge definitely did not happen and
// will not (failed, refused, closed, or authoritatively absent), and
// gives its unit back in the same transaction.
func (s *Service) giveUp(ctx context.Context, tx pgx.Tx, o Order, to State, ev paymentEvent, cause string) (State, error) {
	m := move{from: StatePaying, to: to, cause: cause, event: &ev.ID, effectID: nonEmpty(ev.EffectID)}
	if o.State != StatePaying {
		// A failure after the order moved on (a stale failure after a
		// success, a repeat): refused and logged.
		_, err := s.move(ctx, tx, o.ID, m)
		return o.State, err
	}
	r, err := s.inv.GetForUpdate(ctx, tx, o.ReservationID)
	if err != nil {
		return "", err
	}
	if r.State == reserve.StateHeld {
		m.unit = "release"
	}
	if err := s.mustMove(ctx, tx, o.ID, m); err != nil {
		return "", err
	}
	if m.unit == "release" {
		if err := mustMoveUnit(s.inv.Release(ctx, tx, r.ID)); err != nil {
			return "", fmt.Errorf("flashsale: release the unit of order %d: %w", o.ID, err)
		}
	}
	return to, nil
}

// applyCharge applies the channel's report that the order's charge
// succeeded: the money is taken, whatever we think of the order. So the
// order either gets its unit confirmed (PAID; or CONFIRMED_LATE when the
// hold had been given up and a free unit is retaken) or, with no unit to
// be had, owes the money back (REFUNDING): money is never kept without a
// unit, and no unit is confirmed twice (ORD-O4).
func (s *Service) applyCharge(ctx context.Context, tx pgx.Tx, o Order, ev paymentEvent, cause string) (State, error) {
	if ev.Amount == nil || *ev.Amount != o.Amount || ev.EffectID == "" || (o.EffectID != "" && ev.EffectID != o.EffectID) {
		return "", fmt.Errorf("%w: order %d (amount %d, effect %q) reported charged as effect %q, amount %v",
			errPaymentMismatch, o.ID, o.Amount, o.EffectID, ev.EffectID, ev.Amount)
	}
	charged := move{cause: cause, event: &ev.ID, effectID: &ev.EffectID, charged: ev.Amount, chargeEvent: &ev.ID}
	switch o.State {
	case StatePaying, StateFailed, StateClosed:
	default:
		// The success is already applied (or the order never paid): a
		// repeat, refused and logged (ORD-O3).
		charged.from, charged.to = StatePaying, StatePaid
		_, err := s.move(ctx, tx, o.ID, charged)
		return o.State, err
	}
	r, err := s.inv.GetForUpdate(ctx, tx, o.ReservationID)
	if err != nil {
		return "", err
	}
	if o.State == StatePaying && r.State == reserve.StateHeld {
		// The hold still owns its unit (past its expiry or not: the release
		// job has not taken it back): PAID, one confirmation, one event.
		charged.from, charged.to, charged.unit = StatePaying, StatePaid, "confirm"
		if charged.paidOutbox, err = s.announce(ctx, tx, o, ev.EffectID, false); err != nil {
			return "", err
		}
		if err := s.mustMove(ctx, tx, o.ID, charged); err != nil {
			return "", err
		}
		return StatePaid, mustMoveUnit(s.inv.Confirm(ctx, tx, r.ID))
	}

	// Late: the order had given its hold up (or the release job took it).
	charged.from, charged.to = o.State, statePaidLate
	if err := s.mustMove(ctx, tx, o.ID, charged); err != nil {
		return "", err
	}
	late := move{from: statePaidLate, to: StateConfirmedLate, cause: cause, event: &ev.ID}
	switch r.State {
	case reserve.StateHeld:
		// Still held (an order closed while the release job had not
		// reached its hold): the unit is there to confirm.
		late.unit = "confirm"
		err = mustMoveUnit(s.inv.Confirm(ctx, tx, r.ID))
	case reserve.StateReleased:
		late.unit = "retake"
		var moved bool
		moved, err = s.inv.Retake(ctx, tx, r.ID)
		if errors.Is(err, reserve.ErrSoldOut) || errors.Is(err, reserve.ErrAlreadyHolding) {
			return s.owe(ctx, tx, o, ev, cause+": no unit to retake ("+err.Error()+")")
		}
		if err == nil && !moved {
			err = errUnitDidNotMove
		}
	default:
		err = fmt.Errorf("flashsale: reservation %d is %s before its order %d was paid", r.ID, r.State, o.ID)
	}
	if err != nil {
		return "", fmt.Errorf("flashsale: late payment of order %d: %w", o.ID, err)
	}
	if late.paidOutbox, err = s.announce(ctx, tx, o, ev.EffectID, true); err != nil {
		return "", err
	}
	return StateConfirmedLate, s.mustMove(ctx, tx, o.ID, late)
}

// owe moves a late-paid order without a unit to REFUNDING and enqueues
// its refund in the same transaction: the refund job exists exactly when
// the debt does.
func (s *Service) owe(ctx context.Context, tx pgx.Tx, o Order, ev paymentEvent, cause string) (State, error) {
	if err := s.mustMove(ctx, tx, o.ID, move{from: statePaidLate, to: StateRefunding, cause: cause, event: &ev.ID}); err != nil {
		return "", err
	}
	if s.jobs != nil {
		_, _, err := s.jobs.Enqueue(ctx, tx, claim.NewJob{
			Kind: RefundKind, BusinessKey: refundJobKey(o.ID), Payload: refundPayload{OrderID: o.ID},
			MaxAttempts: s.cfg.RefundAttempts,
		})
		if err != nil {
			return "", fmt.Errorf("flashsale: enqueue the refund of order %d: %w", o.ID, err)
		}
	}
	return StateRefunding, nil
}

// applyRefund ends a REFUNDING order once the channel reports the whole
// amount refunded.
func (s *Service) applyRefund(ctx context.Context, tx pgx.Tx, o Order, ev paymentEvent, cause string) (State, error) {
	m := move{from: StateRefunding, to: StateRefunded, cause: cause, event: &ev.ID, refunded: ev.Refunded, refundEvent: &ev.ID}
	if o.State != StateRefunding {
		// The refund is already applied: a repeat, refused and logged.
		_, err := s.move(ctx, tx, o.ID, m)
		return o.State, err
	}
	if ev.Refunded == nil || *ev.Refunded != o.Amount {
		// A partial refund is not ours (we refund the amount, once): it
		// settles nothing, and the order keeps waiting for its own.
		s.log.Warn("flashsale: refund report does not cover the order", "order", o.ID, "refunded", ev.Refunded, "amount", o.Amount)
		return o.State, nil
	}
	return StateRefunded, s.mustMove(ctx, tx, o.ID, m)
}

// announce appends the order's one order_paid event (ORD-O3).
func (s *Service) announce(ctx context.Context, tx pgx.Tx, o Order, effectID string, late bool) (*int64, error) {
	id, err := outbox.Append(ctx, tx, TopicOrderPaid, strconv.FormatInt(o.ID, 10), PaidEvent{
		OrderID: o.ID, ReservationID: o.ReservationID, UserID: o.UserID, SKU: o.SKU,
		Amount: o.Amount, EffectID: effectID, Late: late,
	})
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// move runs one conditional move and counts it.
func (s *Service) move(ctx context.Context, tx pgx.Tx, id int64, m move) (bool, error) {
	applied, err := moveOrder(ctx, tx, id, m)
	if err == nil {
		s.m.moves.WithLabelValues(string(m.to), strconv.FormatBool(applied)).Inc()
	}
	return applied, err
}

// mustMove is a move the caller has checked under the order's lock: a
// refusal means the lock discipline is broken, and the transaction is
// rolled back rather than committed half-done.
func (s *Service) mustMove(ctx context.Context, tx pgx.Tx, id int64, m move) error {
	applied, err := s.move(ctx, tx, id, m)
	if err == nil && !applied {
		err = fmt.Errorf("flashsale: order %d was not %s under its lock", id, m.from)
	}
	return err
}

var errUnitDidNotMove = errors.New("flashsale: the reservation did not move under its lock")

// mustMoveUnit checks an inventory change the caller decided under the
// reservation's lock.
func mustMoveUnit(moved bool, err error) error {
	if err == nil && !moved {
		return errUnitDidNotMove
	}
	return err
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
