package order

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

const chapter = "flash-sale orders and payment"

// The invariants of chapter 7 (orders), registered under the flash sale's
// module so that e2etest.Assert(t, pool, "flashsale") checks both parts.
// Each query returns the rows that break it: (problem, order_id, detail).
var Invariants = []invariant.Invariant{

	{
		ID: "ORD-O1", Module: reserve.Module, Chapter: chapter,
		Statement: "orders move only along the state machine, each move conditional on the current state; " +
			"a refused move is logged and changes nothing (the applied moves chain from CREATED to the state)",
		SQL: `
SELECT 'state machine table differs from the spec' AS problem, NULL::bigint AS order_id,
       format('%s → %s %s', coalesce(m.from_state, s.from_state), coalesce(m.to_state, s.to_state),
              CASE WHEN m.from_state IS NULL THEN 'missing' ELSE 'extra' END) AS detail
  FROM flashsale_order_move m
  FULL JOIN (VALUES ` + movesValues() + `)
       AS s (from_state, to_state) ON s.from_state = m.from_state AND s.to_state = m.to_state
 WHERE m.from_state IS NULL OR s.from_state IS NULL
UNION ALL
SELECT 'applied move outside the state machine', t.order_id, format('transition %s: %s → %s', t.id, t.from_state, t.to_state)
  FROM flashsale_order_transition t
 WHERE t.applied
   AND NOT EXISTS (SELECT 1 FROM flashsale_order_move m WHERE m.from_state = t.from_state AND m.to_state = t.to_state)
UNION ALL
SELECT 'applied moves do not chain', c.order_id, format('transition %s: %s → %s after %s', c.id, c.from_state, c.to_state, c.prev)
  FROM (SELECT t.id, t.order_id, t.from_state, t.to_state,
               coalesce(lag(t.to_state) OVER (PARTITION BY t.order_id ORDER BY t.id), 'CREATED') AS prev
          FROM flashsale_order_transition t WHERE t.applied) c
 WHERE c.from_state <> c.prev
UNION ALL
SELECT 'state is not where the applied moves lead', o.id, format('state %s, moves lead to %s', o.state, coalesce(last.to_state, 'CREATED'))
  FROM flashsale_order o
  LEFT JOIN LATERAL (SELECT t.to_state FROM flashsale_order_transition t
                      WHERE t.order_id = o.id AND t.applied ORDER BY t.id DESC LIMIT 1) last ON true
 WHERE o.state <> coalesce(last.to_state, 'CREATED')
UNION ALL
SELECT 'refused move that found its expected state', t.order_id, format('transition %s: %s → %s', t.id, t.from_state, t.to_state)
  FROM flashsale_order_transition t
 WHERE NOT t.applied AND t.found_state = t.from_state`,
	},
	{
		ID: "ORD-O2", Module: reserve.Module, Chapter: chapter,
		Statement: "a channel call without a definite answer never fails an order or returns its unit: " +
			"every PAYING → FAILED/CLOSED rests on a definite report (failed, rejected, closed, none), and only such moves release a unit",
		SQL: `
SELECT 'given up without a definite answer' AS problem, t.order_id,
       format('transition %s: %s → %s (%s) on %s', t.id, t.from_state, t.to_state, t.cause,
              coalesce(e.source || ' ' || e.status, 'no report')) AS detail
  FROM flashsale_order_transition t
  LEFT JOIN flashsale_payment_event e ON e.id = t.event_id AND e.order_id = t.order_id
 WHERE t.applied AND t.from_state = 'PAYING' AND t.to_state IN ('FAILED', 'CLOSED')
   AND (e.id IS NULL OR e.status NOT IN ('failed', 'rejected', 'closed', 'none'))
UNION ALL
SELECT 'unit released by a move that does not give the order up', t.order_id,
       format('transition %s: %s → %s', t.id, t.from_state, t.to_state)
  FROM flashsale_order_transition t
 WHERE t.unit = 'release' AND t.to_state NOT IN ('FAILED', 'CLOSED')
UNION ALL
SELECT 'order given up still holds its unit', o.id, format('order %s, reservation %s %s', o.state, r.id, r.state)
  FROM flashsale_order o JOIN flashsale_reservation r ON r.id = o.reservation_id
 WHERE o.state IN ('FAILED', 'CLOSED') AND r.state = 'HELD'`,
	},
	{
		ID: "ORD-O3", Module: reserve.Module, Chapter: chapter,
		Statement: "one payment's success, delivered any number of times in any order, causes at most one transition, " +
			"one inventory confirmation and one order_paid outbox event",
		SQL: `
SELECT 'success applied more than once' AS problem, order_id, format('%s moves into PAID/PAID_LATE', count(*)) AS detail
  FROM flashsale_order_transition WHERE applied AND to_state IN ('PAID', 'PAID_LATE')
 GROUP BY order_id HAVING count(*) > 1
UNION ALL
SELECT 'unit confirmed more than once, or not by a move', o.id, format('state %s, %s confirming moves', o.state, count(t.id))
  FROM flashsale_order o
  LEFT JOIN flashsale_order_transition t ON t.order_id = o.id AND t.unit IN ('confirm', 'retake')
 GROUP BY o.id, o.state
HAVING count(t.id) > 1 OR (count(t.id) = 1) <> (o.state IN ('PAID', 'CONFIRMED_LATE'))
UNION ALL
SELECT 'order and unit disagree', o.id, format('order %s, reservation %s %s', o.state, r.id, r.state)
  FROM flashsale_order o JOIN flashsale_reservation r ON r.id = o.reservation_id
 WHERE (o.state IN ('PAID', 'CONFIRMED_LATE')) <> (r.state = 'CONFIRMED')
UNION ALL
SELECT 'more than one order_paid event', min(o.id), format('key %s: %s events', e.key, count(*))
  FROM outbox_event e LEFT JOIN flashsale_order o ON o.id::text = e.key
 WHERE e.topic = '` + TopicOrderPaid + `'
 GROUP BY e.key HAVING count(*) > 1
UNION ALL
SELECT 'order_paid event of an order that is not confirmed by it', o.id, format('event %s, order %s', e.id, coalesce(o.state, 'missing'))
  FROM outbox_event e LEFT JOIN flashsale_order o ON o.id::text = e.key
 WHERE e.topic = '` + TopicOrderPaid + `'
   AND (o.id IS NULL OR o.state NOT IN ('PAID', 'CONFIRMED_LATE') OR o.paid_outbox_id IS DISTINCT FROM e.id)`,
	},
	{
		ID: "ORD-O4", Module: reserve.Module, Chapter: chapter,
		Statement: "money that arrives after the hold was released buys a free unit (CONFIRMED_LATE) or is refunded once (REFUNDING → REFUNDED): " +
			"money is never kept without a unit, and no unit is confirmed for two orders",
		SQL: `
SELECT 'money kept without a unit' AS problem, o.id AS order_id,
       format('state %s, charged %s, refunded %s, reservation %s %s', o.state, o.charged, o.refunded, r.id, r.state) AS detail
  FROM flashsale_order o JOIN flashsale_reservation r ON r.id = o.reservation_id
 WHERE o.charged - o.refunded > 0 AND r.state <> 'CONFIRMED' AND o.state <> 'REFUNDING'
UNION ALL
SELECT 'refund owed without a refund job', o.id, 'no ` + RefundKind + ` job'
  FROM flashsale_order o
 WHERE o.state = 'REFUNDING'
   AND NOT EXISTS (SELECT 1 FROM job_key k WHERE k.kind = '` + RefundKind + `' AND k.business_key = 'order:' || o.id)
UNION ALL
SELECT 'order left between its late payment and its unit', o.id, o.state
  FROM flashsale_order o WHERE o.state = 'PAID_LATE'
UNION ALL
SELECT 'late confirmation without a retake or confirm', t.order_id, format('transition %s', t.id)
  FROM flashsale_order_transition t
 WHERE t.applied AND t.to_state = 'CONFIRMED_LATE' AND t.unit IS NULL`,
	},
	{
		ID: "ORD-O5", Module: reserve.Module, Chapter: chapter,
		Statement: "callbacks are authenticated (HMAC signature, timestamp window) before they are recorded or applied: " +
			"every recorded callback has its verified signature record, and every move names a report of its own order",
		SQL: `
SELECT 'callback without a verified signature record' AS problem, e.order_id,
       format('event %s (%s): signed %s, verified %s, window %ss', e.id, e.provider_event_id, e.signed_at, e.verified_at, e.window_seconds) AS detail
  FROM flashsale_payment_event e
 WHERE e.source = 'callback'
   AND (e.provider_event_id IS NULL OR e.body_sha256 IS NULL OR e.signed_at IS NULL OR e.verified_at IS NULL
        OR e.window_seconds IS NULL OR abs(extract(epoch FROM e.verified_at - e.signed_at)) > e.window_seconds)
UNION ALL
SELECT 'move caused by another order''s report', t.order_id, format('transition %s, event %s of order %s', t.id, e.id, e.order_id)
  FROM flashsale_order_transition t JOIN flashsale_payment_event e ON e.id = t.event_id
 WHERE e.order_id <> t.order_id`,
	},
	{
		ID: "ORD-M1", Module: reserve.Module, Chapter: chapter,
		Statement: fmt.Sprintf("money: Σ over orders of (charged − refunded) = %d × confirmed orders (refunds still owed aside), "+
			"where charged and refunded are what the channel reported", Price),
		SQL: `
SELECT 'charged is not what the channel reported' AS problem, o.id AS order_id,
       format('charged %s on effect %s; report %s: %s %s of effect %s', o.charged, o.effect_id, e.id, e.source, e.status, e.effect_id) AS detail
  FROM flashsale_order o LEFT JOIN flashsale_payment_event e ON e.id = o.charge_event_id
 WHERE o.charged > 0
   AND (e.id IS NULL OR e.order_id <> o.id OR e.status NOT IN ('succeeded', 'refunded')
        OR e.amount IS DISTINCT FROM o.charged OR e.effect_id IS DISTINCT FROM o.effect_id)
UNION ALL
SELECT 'refunded is not what the channel reported', o.id,
       format('refunded %s; report %s: %s %s refunded %s', o.refunded, e.id, e.source, e.status, e.refunded)
  FROM flashsale_order o LEFT JOIN flashsale_payment_event e ON e.id = o.refund_event_id
 WHERE o.refunded > 0
   AND (e.id IS NULL OR e.order_id <> o.id OR e.status <> 'refunded' OR e.refunded IS DISTINCT FROM o.refunded)
UNION ALL
SELECT 'money equation', NULL,
       format('Σ(charged − refunded) %s − owed back %s ≠ ` + fmt.Sprint(Price) + ` × %s confirmed', m.net, m.owed, m.confirmed)
  FROM (SELECT coalesce(sum(charged - refunded), 0) AS net,
               coalesce(sum(charged - refunded) FILTER (WHERE state IN ('PAID_LATE', 'REFUNDING')), 0) AS owed,
               count(*) FILTER (WHERE state IN ('PAID', 'CONFIRMED_LATE')) AS confirmed
          FROM flashsale_order) m
 WHERE m.net - m.owed <> ` + fmt.Sprint(Price) + ` * m.confirmed`,
	},
	{
		ID: "ORD-S1", Module: reserve.Module, Chapter: chapter, Schema: true,
		Statement: "the orders schema keeps its guards: the state-machine triggers (ORD-O1), the unique callback inbox (ORD-O3), one order per reservation (ORD-O4), the signed-callback CHECK (ORD-O5)",
		SQL: `
SELECT 'guard trigger ' || want.name || ' is missing or disabled' AS problem, want.tbl AS detail
  FROM (VALUES ('flashsale_order_guard', 'flashsale_order'), ('flashsale_order_transition_append_only', 'flashsale_order_transition'),
               ('flashsale_order_move_fixed', 'flashsale_order_move')) AS want (name, tbl)
 WHERE NOT EXISTS (SELECT 1 FROM pg_trigger g
                    WHERE g.tgname = want.name AND g.tgrelid = to_regclass(want.tbl) AND g.tgenabled <> 'D')
UNION ALL
SELECT 'no unique inbox key on flashsale_payment_event (provider_event_id)', 'flashsale_payment_event_inbox'
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'flashsale_payment_event_inbox' AND contype = 'u'
                      AND conrelid = 'flashsale_payment_event'::regclass)
UNION ALL
SELECT 'no unique order per reservation', 'flashsale_order_one_per_reservation'
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'flashsale_order_one_per_reservation' AND contype = 'u'
                      AND conrelid = 'flashsale_order'::regclass)
UNION ALL
SELECT 'callback inbox constraint flashsale_payment_event_signed is missing', 'flashsale_payment_event_signed'
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'flashsale_payment_event_signed' AND contype = 'c'
                      AND conrelid = 'flashsale_payment_event'::regclass)`,
	},
}

// movesValues renders Moves as SQL VALUES rows, so that ORD-O1 compares
// the database's table with the code's state machine.
func movesValues() string {
	var rows []string
	for from, tos := range Moves {
		for _, to := range tos {
			rows = append(rows, fmt.Sprintf("('%s', '%s')", from, to))
		}
	}
	slices.Sort(rows)
	return strings.Join(rows, ", ")
}
