package reserve

import "github.com/fencelab/fencelab/core/invariant"

// Module is the invariant module name of the flash sale (both parts).
const Module = "flashsale"

const chapter = "flash-sale reservations"

// The invariants of chapter 6 (reservations). Each query returns the rows that break
// it: (problem, sku, reservation, detail).
var Invariants = []invariant.Invariant{

	{
		ID: "FS-R1", Module: Module, Chapter: chapter,
		Statement: "active reservations (HELD or CONFIRMED) per SKU never exceed its stock, and available + active = total",
		// The CHECK keeps available in 0..total; this compares it with
		// the reservations that own units.
		SQL: `
SELECT 'available + active <> total' AS problem, s.sku, NULL::bigint AS reservation,
       format('total %s, available %s, active %s', s.total, s.available, count(r.id)) AS detail
  FROM flashsale_sku s
  LEFT JOIN flashsale_reservation r ON r.sku = s.sku AND r.state IN ('HELD', 'CONFIRMED')
 GROUP BY s.sku, s.total, s.available
HAVING s.available + count(r.id) <> s.total OR count(r.id) > s.total`,
	},
	{
		ID: "FS-R2", Module: Module, Chapter: chapter,
		Statement: "one request_key makes at most one reservation however often it is sent (the same key for another user or SKU is a 422)",
		SQL: `
SELECT 'request key with more than one reservation' AS problem, min(sku) AS sku, min(id) AS reservation,
       format('key %s: %s reservations', request_key, count(*)) AS detail
  FROM flashsale_reservation GROUP BY request_key HAVING count(*) > 1`,
	},
	{
		ID: "FS-R3", Module: Module, Chapter: chapter,
		Statement: "a user holds at most one active reservation per SKU (partial unique index)",
		SQL: `
SELECT 'user with more than one active reservation of a SKU' AS problem, sku, min(id) AS reservation,
       format('user %s: %s active', user_id, count(*)) AS detail
  FROM flashsale_reservation WHERE state IN ('HELD', 'CONFIRMED')
 GROUP BY user_id, sku HAVING count(*) > 1`,
	},
	{
		ID: "FS-R4", Module: Module, Chapter: chapter,
		Statement: "per process, reservation work in the database never exceeds the limit, the wait line is bounded and a full line is a 503 at once " +
			"(measured by TestFS04 and the bench); SQL checks what a disconnect could leave behind: no half-done hold",
		// Admission is a property of one process's moment, invisible
		// afterwards; a hold cut short by a disconnect is not. Every
		// reservation must have the take its hold statement logged, so
		// no reservation exists without its unit having been taken.
		SQL: `
SELECT 'reservation without the take of its hold' AS problem, r.sku, r.id AS reservation, r.state AS detail
  FROM flashsale_reservation r
 WHERE NOT EXISTS (SELECT 1 FROM flashsale_stock_move m WHERE m.reservation_id = r.id AND m.reason = 'hold')`,
	},
	{
		ID: "FS-R5", Module: Module, Chapter: chapter,
		Statement: "an expired HELD reservation's unit is returned exactly once, however often the release reruns or races itself " +
			"(available = total + the stock log; each reservation's log matches its state)",
		SQL: `
SELECT 'available disagrees with the stock log' AS problem, s.sku, NULL::bigint AS reservation,
       format('available %s, total %s + log %s', s.available, s.total, coalesce(sum(m.delta), 0)) AS detail
  FROM flashsale_sku s LEFT JOIN flashsale_stock_move m ON m.sku = s.sku
 GROUP BY s.sku, s.total, s.available
HAVING s.available <> s.total + coalesce(sum(m.delta), 0)
UNION ALL
SELECT 'stock log disagrees with the reservation', r.sku, r.id,
       format('state %s, released_at %s, retaken_at %s, log %s', r.state, r.released_at, r.retaken_at,
              (SELECT string_agg(m.reason, ',' ORDER BY m.id) FROM flashsale_stock_move m WHERE m.reservation_id = r.id))
  FROM flashsale_reservation r
 WHERE (SELECT coalesce(sum(m.delta), 0) FROM flashsale_stock_move m WHERE m.reservation_id = r.id)
          <> CASE WHEN r.state IN ('HELD', 'CONFIRMED') THEN -1 ELSE 0 END
    OR (r.released_at IS NOT NULL)
          <> EXISTS (SELECT 1 FROM flashsale_stock_move m WHERE m.reservation_id = r.id AND m.reason = 'release')
    OR (r.retaken_at IS NOT NULL)
          <> EXISTS (SELECT 1 FROM flashsale_stock_move m WHERE m.reservation_id = r.id AND m.reason = 'retake')
UNION ALL
SELECT 'stock log entry for another SKU than its reservation', m.sku, m.reservation_id, m.reason
  FROM flashsale_stock_move m JOIN flashsale_reservation r ON r.id = m.reservation_id
 WHERE m.sku <> r.sku`,
	},
	{
		ID: "FS-S1", Module: Module, Chapter: chapter, Schema: true,
		Statement: "the reservations schema keeps its guards: unique request_key (FS-R2), the partial unique index of one active hold per user and SKU (FS-R3), unique (reservation_id, reason) in the stock log (FS-R5)",
		SQL: `
SELECT 'no unique constraint on flashsale_reservation (request_key)' AS problem, 'flashsale_reservation' AS detail
 WHERE NOT EXISTS (
    SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE i.indrelid = 'flashsale_reservation'::regclass AND i.indisunique AND i.indpred IS NULL
       AND i.indnkeyatts = 1 AND a.attname = 'request_key')
UNION ALL
SELECT 'partial unique index flashsale_reservation_one_active is missing', 'flashsale_reservation'
 WHERE NOT EXISTS (
    SELECT 1 FROM pg_index i
     WHERE i.indexrelid = to_regclass('flashsale_reservation_one_active') AND i.indisunique AND i.indpred IS NOT NULL)
UNION ALL
SELECT 'no unique key on flashsale_stock_move (reservation_id, reason)', 'flashsale_stock_move'
 WHERE NOT EXISTS (
    SELECT 1 FROM pg_constraint WHERE conname = 'flashsale_stock_move_once' AND contype = 'u'
       AND conrelid = 'flashsale_stock_move'::regclass)`,
	},
}
