package order

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// MaxCallbackBytes bounds a callback body.
const MaxCallbackBytes = 64 << 10

// The callback types the channel sends.
const (
	CallbackSucceeded = "effect.succeeded"
	CallbackFailed    = "effect.failed"
	callbackClosed    = "effect.closed"
	callbackRefunded  = "effect.refunded"
)

// Callback handles one delivery from the channel: header is its
// Fake-Signature, body the exact bytes that were signed.
//
// ORD-O5, in this order, before anything is read or written:
//   - the HMAC must verify (else ErrCallbackSignature, 401) and the signed
//     timestamp lie within the window of our clock (else ErrCallbackStale,
//     401: a captured callback replayed later);
//   - the body must be a well-formed callback (else 400).
//
// Then the channel's event id is the inbox key. A redelivery of a
// recorded event — the channel retrying, or a replay inside the window —
// is answered 200 with duplicate = true and changes nothing but the
// event's delivery count; the same id with another body is refused with
// 409 (ErrCallbackConflict). A callback for no order of ours is a 404, one
// that names another charge or amount than the order's a 422; neither is
// recorded.
//
// A success is applied at once: the money is taken, and applying it is
// always safe (ORD-O4). A failure or close would give the buyer's unit
// back, which a later success cannot simply undo, so it is first
// confirmed by the channel's authoritative query; the query's answer is
// what gets applied (ORD-O3: a stale failure shuffled among duplicated
// successes cannot fail a paid order).
func (s *Service) Callback(ctx context.Context, header string, body []byte) (CallbackAnswer, error) {
	verifiedAt := time.Now()
	if err := fakeprovider.Verify(s.cfg.CallbackSecret, header, body, verifiedAt, s.cfg.CallbackWindow); err != nil {
		if errors.Is(err, fakeprovider.ErrStaleSignature) {
			s.m.callbacks.WithLabelValues("stale").Inc()
			return CallbackAnswer{}, errCallbackStale
		}
		s.m.callbacks.WithLabelValues("forged").Inc()
		return CallbackAnswer{}, errCallbackSignature
	}
	cb, err := parseCallback(body)
	if err != nil {
		s.m.callbacks.WithLabelValues("malformed").Inc()
		return CallbackAnswer{}, err
	}
	sum := sha256.Sum256(body)
	sig := &signature{bodySHA256: sum[:], signedAt: signedAt(header), verifiedAt: verifiedAt, window: s.cfg.CallbackWindow}

	// A redelivery is answered from the inbox without asking anyone.
	if prior, found, err := findInbox(ctx, s.pool, cb.ID); err != nil {
		return CallbackAnswer{}, err
	} else if found {
		return s.redelivery(ctx, prior, sig.bodySHA256, cb.ID)
	}

	ev := paymentEvent{Source: SourceCallback, ProviderEventID: cb.ID, Type: cb.Type, EffectID: cb.Effect.ID,
		Status: cb.Effect.Status, Amount: &cb.Effect.Amount, Refunded: &cb.Effect.Refunded}
	var confirmation *paymentEvent
	if !ev.charged() && ev.Status != PayPending {
		q := s.ask(ctx, cb.Effect.Reference, cb.Effect.Key)
		confirmation = &q
	}

	var ans CallbackAnswer
	var duplicateOf *inboxEntry
	err = pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		o, err := lockOrderByRef(ctx, tx, cb.Effect.Reference)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: reference %q", errCallbackOrder, cb.Effect.Reference)
		}
		if err != nil {
			return err
		}
		if cb.Effect.Key != o.ChargeKey() || cb.Effect.Amount != o.Amount || (o.EffectID != "" && cb.Effect.ID != o.EffectID) {
			return fmt.Errorf("%w: order %d", errPaymentMismatch, o.ID)
		}
		id, inserted, err := insertEvent(ctx, tx, o.ID, ev, sig)
		if err != nil {
			return err
		}
		if !inserted {
			// A concurrent delivery of the same event committed first
			// (we waited for it on the order's lock).
			prior, _, err := findInbox(ctx, tx, cb.ID)
			duplicateOf = &prior
			return err
		}
		ev.ID = id
		cause := "callback " + cb.ID
		decision := ev
		if confirmation != nil {
			qid, _, err := insertEvent(ctx, tx, o.ID, *confirmation, nil)
			if err != nil {
				return err
			}
			decision = *confirmation
			decision.ID = qid
			cause += " (" + cb.Effect.Status + "), checked by query: " + confirmation.Status
		}
		state, err := s.apply(ctx, tx, o, decision, cause)
		ans = CallbackAnswer{EventID: cb.ID, OrderID: o.ID, State: state}
		return err
	})
	if duplicateOf != nil && err == nil {
		return s.redelivery(ctx, *duplicateOf, sig.bodySHA256, cb.ID)
	}
	switch {
	case errors.Is(err, errCallbackOrder):
		s.m.callbacks.WithLabelValues("unknown_order").Inc()
	case errors.Is(err, errPaymentMismatch):
		s.m.callbacks.WithLabelValues("mismatch").Inc()
	case err == nil:
		s.m.callbacks.WithLabelValues("applied").Inc()
	}
	return ans, err
}

// redelivery answers an event already in the inbox: the same bytes are a
// duplicate (counted, nothing else changes); other bytes under the same
// id are refused.
func (s *Service) redelivery(ctx context.Context, prior inboxEntry, sum []byte, eventID string) (CallbackAnswer, error) {
	if !bytes.Equal(prior.bodySHA256, sum) {
		s.m.callbacks.WithLabelValues("conflict").Inc()
		return CallbackAnswer{}, fmt.Errorf("%w: %s", errCallbackConflict, eventID)
	}
	var state State
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if err := countRedelivery(ctx, tx, prior.id); err != nil {
			return err
		}
		o, err := getOrder(ctx, tx, prior.orderID)
		state = o.State
		return err
	})
	if err != nil {
		return CallbackAnswer{}, err
	}
	s.m.callbacks.WithLabelValues("duplicate").Inc()
	return CallbackAnswer{EventID: eventID, OrderID: prior.orderID, State: state, Duplicate: true}, nil
}

// ask is the channel's authoritative answer about an order's charge, by
// its merchant reference, as a payment event to record: the charge's
// status, none (the channel has no such charge), or unknown (no answer).
func (s *Service) ask(ctx context.Context, ref, chargeKey string) paymentEvent {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
	effects, err := s.channel.Find(callCtx, fakeprovider.Lookup{Reference: ref})
	cancel()
	ev := paymentEvent{Source: sourceQuery}
	switch e, found := pickCharge(effects, chargeKey); {
	case err != nil:
		ev.Status, ev.Detail = PayUnknown, err.Error()
	case !found:
		ev.Status = payNone
	default:
		ev.Status, ev.EffectID, ev.Amount, ev.Refunded = e.Status, e.ID, &e.Amount, &e.Refunded
	}
	s.m.calls.WithLabelValues("query", ev.Status).Inc()
	return ev
}

// pickCharge finds the order's charge among the effects under its
// reference: the one made with its charge key (there is one: the key
// makes every retry the same charge).
func pickCharge(effects []fakeprovider.Effect, chargeKey string) (fakeprovider.Effect, bool) {
	for _, e := range effects {
		if e.Key == chargeKey {
			return e, true
		}
	}
	return fakeprovider.Effect{}, false
}

// parseCallback decodes a verified body strictly.
func parseCallback(body []byte) (fakeprovider.Callback, error) {
	var cb fakeprovider.Callback
	// The same strict rules as every request body (httpx.DecodeJSON): no
	// duplicate or case-variant keys, no text the database cannot store.
	if err := httpx.DecodeJSON(body, &cb); err != nil {
		detail := "malformed JSON"
		var p *httpx.Problem
		if errors.As(err, &p) {
			detail = p.Detail
		}
		return cb, fmt.Errorf("%w: %s", errCallbackMalformed, detail)
	}
	switch {
	case cb.ID == "" || len(cb.ID) > 255:
		return cb, fmt.Errorf("%w: id must be 1-255 bytes", errCallbackMalformed)
	case cb.Type != CallbackSucceeded && cb.Type != CallbackFailed && cb.Type != callbackClosed && cb.Type != callbackRefunded:
		return cb, fmt.Errorf("%w: unknown type %q", errCallbackMalformed, cb.Type)
	case cb.Effect.ID == "" || len(cb.Effect.ID) > 255 || cb.Effect.Reference == "" || len(cb.Effect.Reference) > 255:
		return cb, fmt.Errorf("%w: effect id and reference are required", errCallbackMalformed)
	case cb.Effect.Amount < 0 || cb.Effect.Refunded < 0:
		return cb, fmt.Errorf("%w: negative amount", errCallbackMalformed)
	}
	switch cb.Effect.Status {
	case PayPending, PaySucceeded, payFailed, payClosed, payRefunded:
	default:
		return cb, fmt.Errorf("%w: unknown effect status %q", errCallbackMalformed, cb.Effect.Status)
	}
	return cb, nil
}

// signedAt is the t= of a header Verify accepted.
func signedAt(header string) time.Time {
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			sec, _ := strconv.ParseInt(v, 10, 64)
			return time.Unix(sec, 0)
		}
	}
	return time.Time{}
}
