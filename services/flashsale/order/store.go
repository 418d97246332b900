package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// All of the order layer's SQL (invariants.go holds the checks). Part A's
// tables are written only through reserve.Inventory.
//
// Lock order, everywhere: the order row, then (through the inventory) the
// reservation row, then the SKU row. The release job locks reservation
// rows and then the SKU row and never an order, so no cycle exists.
const (
	orderColumns = `id, reservation_id, user_id, sku, amount, state, pay_ref, effect_id, charged, refunded,
       created_at, updated_at, paying_since, charge_event_id`

	// sqlInsertOrder: one order per reservation. The reservation row is
	// locked by the caller, so a concurrent create for it has committed or
	// not started; a conflict means it committed first.
	sqlInsertOrder = `
INSERT INTO flashsale_order (reservation_id, user_id, sku, amount) VALUES ($1, $2, $3, $4)
ON CONFLICT (reservation_id) DO NOTHING
RETURNING ` + orderColumns

	sqlGetOrder           = `SELECT ` + orderColumns + ` FROM flashsale_order WHERE id = $1`
	sqlLockOrder          = sqlGetOrder + ` FOR UPDATE`
	sqlLockOrderByRef     = `SELECT ` + orderColumns + ` FROM flashsale_order WHERE pay_ref = $1 FOR UPDATE`
	sqlOrderByReservation = `SELECT ` + orderColumns + ` FROM flashsale_order WHERE reservation_id = $1`

	// sqlMove is every state change of an order (ORD-O1): conditional on
	// the expected state, and logged in the same statement whether it
	// applied or not. A refused move changes nothing but its log row,
	// which records the state it found. Money and evidence columns are
	// written only here, with the move that justifies them (the guard
	// trigger refuses them otherwise, and refuses any move not in
	// flashsale_order_move: the first line).
	sqlMove = `
WITH moved AS (
    UPDATE flashsale_order
       SET state           = @to::text,
           updated_at      = now(),
           paying_since    = CASE WHEN @to = 'PAYING' THEN now() ELSE paying_since END,
           effect_id       = coalesce(effect_id, @effect_id),
           charged         = coalesce(@charged, charged),
           charge_event_id = coalesce(@charge_event_id, charge_event_id),
           refunded        = coalesce(@refunded, refunded),
           refund_event_id = coalesce(@refund_event_id, refund_event_id),
           paid_outbox_id  = coalesce(@paid_outbox_id, paid_outbox_id)
     WHERE id = @id AND state = @from::text
 RETURNING id
)
INSERT INTO flashsale_order_transition (order_id, from_state, to_state, applied, found_state, unit, cause, event_id)
SELECT o.id, @from::text, @to::text, EXISTS (SELECT 1 FROM moved), o.state,
       CASE WHEN EXISTS (SELECT 1 FROM moved) THEN @unit::text END, @cause::text, @event_id::bigint
  FROM flashsale_order o
 WHERE o.id = @id
RETURNING applied`

	// sqlLearnEffect records the channel's id of the charge the first time
	// it is reported (the pay answer, or a query after a dropped answer).
	sqlLearnEffect = `
UPDATE flashsale_order SET effect_id = $2, updated_at = now() WHERE id = $1 AND effect_id IS NULL`

	eventColumns = `id, source, coalesce(provider_event_id, ''), coalesce(event_type, ''), coalesce(effect_id, ''), status,
       amount, refunded, coalesce(detail, ''), signed_at, verified_at, deliveries, received_at`

	// sqlInsertEvent records one report from the channel. A callback's
	// provider event id is the inbox key: a second delivery inserts
	// nothing (ORD-O3) and is answered from the first row.
	sqlInsertEvent = `
INSERT INTO flashsale_payment_event (order_id, source, provider_event_id, event_type, effect_id, status, amount, refunded,
                                     detail, body_sha256, signed_at, verified_at, window_seconds)
VALUES (@order_id, @source, nullif(@provider_event_id, ''), nullif(@event_type, ''), nullif(@effect_id, ''), @status, @amount, @refunded, nullif(@detail, ''), @body_sha256, @signed_at, @verified_at, @window_seconds)
ON CONFLICT (provider_event_id) DO NOTHING
RETURNING id`

	sqlInboxEntry = `
SELECT id, order_id, body_sha256 FROM flashsale_payment_event WHERE provider_event_id = $1`

	sqlRedelivered = `
UPDATE flashsale_payment_event SET deliveries = deliveries + 1, last_delivered_at = now() WHERE id = $1`

	sqlTransitions = `
SELECT id, from_state, to_state, applied, found_state, coalesce(unit, ''), cause, event_id, at
  FROM flashsale_order_transition WHERE order_id = $1 ORDER BY id`

	sqlEvents = `SELECT ` + eventColumns + ` FROM flashsale_payment_event WHERE order_id = $1 ORDER BY id`

	// sqlWaiting lists the orders reconciliation asks the channel about:
	// PAYING longer than $1 (the pay call and its callback had their
	// chance) and REFUNDING longer than $1 (the refund job had its). For
	// a PAYING order it says whether the hold still stands: while it does,
	// a pending charge may still be paid; after, it is closed.
	sqlWaiting = `
(SELECT o.id, o.state, r.state = 'HELD' AND r.expires_at > now()
   FROM flashsale_order o JOIN flashsale_reservation r ON r.id = o.reservation_id
  WHERE o.state = 'PAYING' AND o.paying_since <= now() - $1 * interval '1 millisecond'
  ORDER BY o.paying_since LIMIT $2)
UNION ALL
(SELECT o.id, o.state, false
   FROM flashsale_order o
  WHERE o.state = 'REFUNDING' AND o.updated_at <= now() - $1 * interval '1 millisecond'
  ORDER BY o.updated_at LIMIT $2)`

	sqlNow = `SELECT now()`
)

func scanOrder(row pgx.Row) (Order, error) {
	var o Order
	var effect *string
	err := row.Scan(&o.ID, &o.ReservationID, &o.UserID, &o.SKU, &o.Amount, &o.State, &o.PaymentRef, &effect,
		&o.Charged, &o.Refunded, &o.CreatedAt, &o.UpdatedAt, &o.PayingSince, &o.chargeEventID)
	if effect != nil {
		o.EffectID = *effect
	}
	return o, err
}

// readOrder runs a query that answers one order (ErrNotFound when none).
func readOrder(ctx context.Context, db pg.Querier, sql string, arg any) (Order, error) {
	o, err := scanOrder(db.QueryRow(ctx, sql, arg))
	if err = pg.MapError(err); err != nil {
		if errors.Is(err, pg.ErrNotFound) {
			return Order{}, ErrNotFound
		}
		return Order{}, fmt.Errorf("flashsale: read order: %w", err)
	}
	return o, nil
}

func getOrder(ctx context.Context, db pg.Querier, id int64) (Order, error) {
	return readOrder(ctx, db, sqlGetOrder, id)
}

func lockOrder(ctx context.Context, tx pgx.Tx, id int64) (Order, error) {
	return readOrder(ctx, tx, sqlLockOrder, id)
}

func lockOrderByRef(ctx context.Context, tx pgx.Tx, ref string) (Order, error) {
	return readOrder(ctx, tx, sqlLockOrderByRef, ref)
}

func orderByReservation(ctx context.Context, db pg.Querier, reservationID int64) (Order, bool, error) {
	o, err := readOrder(ctx, db, sqlOrderByReservation, reservationID)
	switch {
	case errors.Is(err, ErrNotFound):
		return Order{}, false, nil
	case err != nil:
		return Order{}, false, err
	}
	return o, true, nil
}

func insertOrder(ctx context.Context, tx pgx.Tx, reservationID int64, userID, sku string, amount int64) (Order, bool, error) {
	o, err := scanOrder(tx.QueryRow(ctx, sqlInsertOrder, reservationID, userID, sku, amount))
	switch err = pg.MapError(err); {
	case err == nil:
		return o, true, nil
	case errors.Is(err, pg.ErrNotFound):
		return Order{}, false, nil
	}
	return Order{}, false, fmt.Errorf("flashsale: insert order: %w", err)
}

// move is one state change and what commits with it.
type move struct {
	from, to State
	unit     string // the inventory change made with it: confirm | retake | release
	cause    string
	event    *int64 // the payment event that caused it

	effectID    *string
	charged     *int64
	chargeEvent *int64
	refunded    *int64
	refundEvent *int64
	paidOutbox  *int64
}

// SQLMove is the move statement as the product runs it. It is exported
// for one reader: the lab's naive callback handler (lab/orders) runs this
// very statement minus its state condition, so the naive version differs
// from the product by the guard alone (ORD-O1, ORD-O3).
const SQLMove = sqlMove

// moveStmt is sqlMove rewritten to $n once (pg.MustNamed).
var moveStmt = pg.MustNamed(sqlMove)

// moveOrder runs sqlMove and reports whether the move applied.
func moveOrder(ctx context.Context, tx pgx.Tx, id int64, m move) (bool, error) {
	var unit *string
	if m.unit != "" {
		unit = &m.unit
	}
	var applied bool
	err := tx.QueryRow(ctx, moveStmt.SQL, moveStmt.Args(pgx.NamedArgs{
		"id":              id,
		"from":            m.from,
		"to":              m.to,
		"unit":            unit,
		"cause":           m.cause,
		"effect_id":       m.effectID,
		"charged":         m.charged,
		"charge_event_id": m.chargeEvent,
		"refunded":        m.refunded,
		"refund_event_id": m.refundEvent,
		"paid_outbox_id":  m.paidOutbox,
		"event_id":        m.event,
	})...).Scan(&applied)
	if err != nil {
		return false, fmt.Errorf("flashsale: move order %d %s → %s: %w", id, m.from, m.to, pg.MapError(err))
	}
	return applied, nil
}

func learnEffect(ctx context.Context, tx pgx.Tx, id int64, effectID string) error {
	if _, err := tx.Exec(ctx, sqlLearnEffect, id, effectID); err != nil {
		return fmt.Errorf("flashsale: record effect of order %d: %w", id, pg.MapError(err))
	}
	return nil
}

// signature is a verified callback's record (ORD-O5).
type signature struct {
	bodySHA256 []byte
	signedAt   time.Time
	verifiedAt time.Time
	window     time.Duration
}

// insertEventStmt is sqlInsertEvent rewritten to $n once (pg.MustNamed).
var insertEventStmt = pg.MustNamed(sqlInsertEvent)

// insertEvent records a report. inserted is false when a callback with the
// same provider event id is already in the inbox.
func insertEvent(ctx context.Context, tx pgx.Tx, orderID int64, e paymentEvent, sig *signature) (id int64, inserted bool, err error) {
	var sum []byte
	var signedAt, verifiedAt *time.Time
	var window *int
	if sig != nil {
		secs := int(sig.window / time.Second)
		sum, signedAt, verifiedAt, window = sig.bodySHA256, &sig.signedAt, &sig.verifiedAt, &secs
	}
	err = tx.QueryRow(ctx, insertEventStmt.SQL, insertEventStmt.Args(pgx.NamedArgs{
		"order_id":          orderID,
		"source":            e.Source,
		"provider_event_id": e.ProviderEventID,
		"event_type":        e.Type,
		"effect_id":         e.EffectID,
		"status":            e.Status,
		"amount":            e.Amount,
		"refunded":          e.Refunded,
		"detail":            truncate(e.Detail, 500),
		"body_sha256":       sum,
		"signed_at":         signedAt,
		"verified_at":       verifiedAt,
		"window_seconds":    window,
	})...).Scan(&id)
	switch err = pg.MapError(err); {
	case err == nil:
		return id, true, nil
	case errors.Is(err, pg.ErrNotFound):
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("flashsale: record payment event of order %d: %w", orderID, err)
}

// inboxEntry is a callback already received.
type inboxEntry struct {
	id, orderID int64
	bodySHA256  []byte
}

func findInbox(ctx context.Context, db pg.Querier, providerEventID string) (inboxEntry, bool, error) {
	var e inboxEntry
	err := db.QueryRow(ctx, sqlInboxEntry, providerEventID).Scan(&e.id, &e.orderID, &e.bodySHA256)
	switch err = pg.MapError(err); {
	case err == nil:
		return e, true, nil
	case errors.Is(err, pg.ErrNotFound):
		return inboxEntry{}, false, nil
	}
	return inboxEntry{}, false, fmt.Errorf("flashsale: read payment inbox: %w", err)
}

func countRedelivery(ctx context.Context, tx pgx.Tx, id int64) error {
	if _, err := tx.Exec(ctx, sqlRedelivered, id); err != nil {
		return fmt.Errorf("flashsale: count redelivery: %w", pg.MapError(err))
	}
	return nil
}

func transitions(ctx context.Context, db pg.Querier, orderID int64) ([]transition, error) {
	rows, err := db.Query(ctx, sqlTransitions, orderID)
	if err != nil {
		return nil, fmt.Errorf("flashsale: read transitions: %w", pg.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (transition, error) {
		var t transition
		err := r.Scan(&t.ID, &t.From, &t.To, &t.Applied, &t.FoundState, &t.Unit, &t.Cause, &t.EventID, &t.At)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("flashsale: read transitions: %w", pg.MapError(err))
	}
	return out, nil
}

func paymentEvents(ctx context.Context, db pg.Querier, orderID int64) ([]paymentEvent, error) {
	rows, err := db.Query(ctx, sqlEvents, orderID)
	if err != nil {
		return nil, fmt.Errorf("flashsale: read payment events: %w", pg.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (paymentEvent, error) {
		var e paymentEvent
		err := r.Scan(&e.ID, &e.Source, &e.ProviderEventID, &e.Type, &e.EffectID, &e.Status, &e.Amount, &e.Refunded,
			&e.Detail, &e.SignedAt, &e.VerifiedAt, &e.Deliveries, &e.ReceivedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("flashsale: read payment events: %w", pg.MapError(err))
	}
	return out, nil
}

// waiting is one order reconciliation looks at.
type waiting struct {
	id       int64
	state    State
	holdLive bool
}

func waitingOrders(ctx context.Context, db pg.Querier, after time.Duration, limit int) ([]waiting, error) {
	rows, err := db.Query(ctx, sqlWaiting, after.Milliseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("flashsale: orders to reconcile: %w", pg.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (waiting, error) {
		var w waiting
		err := r.Scan(&w.id, &w.state, &w.holdLive)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("flashsale: orders to reconcile: %w", pg.MapError(err))
	}
	return out, nil
}

// dbNow is the transaction's clock: holds expire by the database's time.
func dbNow(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, sqlNow).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("flashsale: read clock: %w", pg.MapError(err))
	}
	return now, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
