package reserve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// All of the reservation layer's SQL (invariants.go holds the checks).
// Lock order, everywhere: reservation rows first, then the SKU row. The
// SKU row is the hot spot of a sale; every statement takes it last and
// holds it only until its own commit.
const (
	sqlCreateSKU = `
INSERT INTO flashsale_sku (sku, total, available) VALUES ($1, $2, $2)
ON CONFLICT (sku) DO NOTHING`

	// sqlPrecheck answers most requests without a write or a lock: is the
	// SKU known and is anything left; did this request key already make a
	// reservation (a replay, or FS-R2's 422); does the user already hold
	// this SKU (FS-R3). Its answers are hints for a fast refusal; the hold
	// statement and the constraints decide.
	sqlPrecheck = `
SELECT s.available, r.id, r.user_id, r.sku,
       (SELECT a.id FROM flashsale_reservation a
         WHERE a.user_id = $3 AND a.sku = $1 AND a.state IN ('HELD', 'CONFIRMED') LIMIT 1)
  FROM (SELECT 1) AS one
  LEFT JOIN flashsale_sku s ON s.sku = $1
  LEFT JOIN flashsale_reservation r ON r.request_key = $2`

	// sqlHold is the hold: take a unit, record the reservation and log the
	// take, in one statement. FS-R1: the WHERE available > 0 is the second
	// line behind the CHECK; a hold that waited for the SKU row re-checks
	// it on the row it gets. The insert reads from the take, so it runs
	// only when a unit was taken: zero rows means sold out and nothing was
	// written. A unique violation (FS-R2's request key, FS-R3's one active
	// hold) fails the statement and undoes the take with it.
	sqlHold = `
WITH take AS (
    UPDATE flashsale_sku SET available = available - 1
     WHERE sku = $1 AND available > 0
 RETURNING sku
), held AS (
    INSERT INTO flashsale_reservation (sku, user_id, request_key, state, expires_at)
    SELECT sku, $2, $3, 'HELD', now() + $4 * interval '1 millisecond' FROM take
 RETURNING ` + reservationColumns + `
), logged AS (
    INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta)
    SELECT sku, id, 'hold', -1 FROM held
)
SELECT ` + reservationColumns + ` FROM held`

	reservationColumns = `id, sku, user_id, request_key, state, expires_at, created_at, confirmed_at, released_at, retaken_at`

	sqlGet = `SELECT ` + reservationColumns + ` FROM flashsale_reservation WHERE id = $1`

	sqlGetByKey = `SELECT ` + reservationColumns + ` FROM flashsale_reservation WHERE request_key = $1`

	// sqlStock reads the SKU and its active reservations in one snapshot,
	// so the three counts add up to the stock (FS-R1).
	sqlStock = `
SELECT s.sku, s.total, s.available,
       count(r.id) FILTER (WHERE r.state = 'HELD'),
       count(r.id) FILTER (WHERE r.state = 'CONFIRMED')
  FROM flashsale_sku s
  LEFT JOIN flashsale_reservation r ON r.sku = s.sku AND r.state IN ('HELD', 'CONFIRMED')
 WHERE s.sku = $1
 GROUP BY s.sku, s.total, s.available`

	// sqlConfirm: HELD → CONFIRMED. The unit was taken at hold time, so
	// the stock does not move. Conditional on the state: a release that
	// came first (the row lock orders them) leaves nothing to confirm.
	sqlConfirm = `
UPDATE flashsale_reservation SET state = 'CONFIRMED', confirmed_at = now()
 WHERE id = $1 AND state = 'HELD'`

	// sqlRelease: HELD → RELEASED and the unit back, in one statement
	// (FS-R5): the conditional transition decides, the log's unique key
	// refuses a second return, and the stock moves only for rows that
	// moved.
	sqlRelease = `
WITH released AS (
    UPDATE flashsale_reservation SET state = 'RELEASED', released_at = now()
     WHERE id = $1 AND state = 'HELD'
 RETURNING id, sku
), logged AS (
    INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta)
    SELECT sku, id, 'release', 1 FROM released
), returned AS (
    UPDATE flashsale_sku s SET available = s.available + 1
      FROM released WHERE s.sku = released.sku
)
SELECT count(*) FROM released`

	// sqlDueSKUs lists the SKUs with expired holds; the release works one
	// SKU per statement so that each statement locks one SKU row (two
	// concurrent runs cannot deadlock on two SKUs taken in opposite order).
	sqlDueSKUs = `
SELECT DISTINCT sku FROM flashsale_reservation
 WHERE state = 'HELD' AND expires_at <= now()
 ORDER BY sku`

	// sqlReleaseExpired returns up to $2 expired holds of SKU $1, each
	// exactly once (FS-R5): SKIP LOCKED lets concurrent runs pick disjoint
	// rows (their commits then queue on the SKU row, each adding its own
	// count); a row another run released first fails the re-check of state
	// under FOR UPDATE and is skipped; the UPDATE's own state condition is
	// the second line and the log's unique key the third. The units go
	// back in the same statement.
	sqlReleaseExpired = `
WITH due AS (
    SELECT id FROM flashsale_reservation
     WHERE sku = $1 AND state = 'HELD' AND expires_at <= now()
     ORDER BY expires_at, id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE flashsale_reservation r SET state = 'RELEASED', released_at = now()
      FROM due
     WHERE r.id = due.id AND r.state = 'HELD'
 RETURNING r.id, r.sku
), logged AS (
    INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta)
    SELECT sku, id, 'release', 1 FROM released
), returned AS (
    UPDATE flashsale_sku SET available = available + (SELECT count(*) FROM released)
     WHERE sku = $1 AND EXISTS (SELECT 1 FROM released)
)
SELECT count(*) FROM released`

	// sqlLockReleased locks a released reservation before Retake decides.
	sqlLockReleased = `
SELECT sku FROM flashsale_reservation WHERE id = $1 AND state = 'RELEASED' FOR UPDATE`

	// sqlRetake: RELEASED → CONFIRMED, taking a unit again, in one
	// statement, on a row sqlLockReleased locked; zero means no unit was
	// free and nothing changed.
	sqlRetake = `
WITH take AS (
    UPDATE flashsale_sku SET available = available - 1
     WHERE sku = $2 AND available > 0
       AND EXISTS (SELECT 1 FROM flashsale_reservation WHERE id = $1 AND state = 'RELEASED')
 RETURNING sku
), retaken AS (
    UPDATE flashsale_reservation r SET state = 'CONFIRMED', confirmed_at = now(), retaken_at = now()
      FROM take
     WHERE r.id = $1 AND r.state = 'RELEASED'
 RETURNING r.id, r.sku
), logged AS (
    INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta)
    SELECT sku, id, 'retake', -1 FROM retaken
)
SELECT count(*) FROM retaken`
)

// Constraint names the code tells apart (migration 0200).
const (
	constraintRequestKey = "flashsale_reservation_request_key"
	constraintOneActive  = "flashsale_reservation_one_active"
)

func scanReservation(row pgx.Row) (Reservation, error) {
	var r Reservation
	err := row.Scan(&r.ID, &r.SKU, &r.UserID, &r.RequestKey, &r.State, &r.ExpiresAt, &r.CreatedAt,
		&r.ConfirmedAt, &r.ReleasedAt, &r.RetakenAt)
	return r, err
}

// precheck is sqlPrecheck's answer.
type precheck struct {
	available *int   // nil: unknown SKU
	keyID     *int64 // the reservation this request key made, if any
	keyUser   *string
	keySKU    *string
	holdingID *int64 // the user's active reservation of the SKU, if any
}

func readPrecheck(ctx context.Context, db pg.Querier, h HoldRequest) (precheck, error) {
	var p precheck
	err := db.QueryRow(ctx, sqlPrecheck, h.SKU, h.RequestKey, h.UserID).
		Scan(&p.available, &p.keyID, &p.keyUser, &p.keySKU, &p.holdingID)
	if err != nil {
		return precheck{}, fmt.Errorf("flashsale: precheck: %w", pg.MapError(err))
	}
	return p, nil
}

// insertHold runs sqlHold. found is false when no unit was left.
func insertHold(ctx context.Context, tx pgx.Tx, h HoldRequest, ttl time.Duration) (r Reservation, found bool, err error) {
	r, err = scanReservation(tx.QueryRow(ctx, sqlHold, h.SKU, h.UserID, h.RequestKey, ttl.Milliseconds()))
	switch err = pg.MapError(err); {
	case err == nil:
		return r, true, nil
	case errors.Is(err, pg.ErrNotFound):
		return Reservation{}, false, nil
	}
	return Reservation{}, false, err
}

func getReservation(ctx context.Context, db pg.Querier, id int64) (Reservation, error) {
	r, err := scanReservation(db.QueryRow(ctx, sqlGet, id))
	if err = pg.MapError(err); err != nil {
		if errors.Is(err, pg.ErrNotFound) {
			return Reservation{}, fmt.Errorf("%w: %d", errNotFound, id)
		}
		return Reservation{}, fmt.Errorf("flashsale: get reservation %d: %w", id, err)
	}
	return r, nil
}

func getByKey(ctx context.Context, db pg.Querier, key string) (Reservation, bool, error) {
	r, err := scanReservation(db.QueryRow(ctx, sqlGetByKey, key))
	if err = pg.MapError(err); err != nil {
		if errors.Is(err, pg.ErrNotFound) {
			return Reservation{}, false, nil
		}
		return Reservation{}, false, fmt.Errorf("flashsale: get reservation by key: %w", err)
	}
	return r, true, nil
}

func readStock(ctx context.Context, db pg.Querier, sku string) (Stock, error) {
	var s Stock
	err := db.QueryRow(ctx, sqlStock, sku).Scan(&s.SKU, &s.Stock, &s.Available, &s.Held, &s.Confirmed)
	if err = pg.MapError(err); err != nil {
		if errors.Is(err, pg.ErrNotFound) {
			return Stock{}, fmt.Errorf("%w: %s", errUnknownSKU, sku)
		}
		return Stock{}, fmt.Errorf("flashsale: stock of %s: %w", sku, err)
	}
	return s, nil
}

func dueSKUs(ctx context.Context, db pg.Querier) ([]string, error) {
	rows, err := db.Query(ctx, sqlDueSKUs)
	if err != nil {
		return nil, fmt.Errorf("flashsale: due skus: %w", pg.MapError(err))
	}
	skus, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("flashsale: due skus: %w", pg.MapError(err))
	}
	return skus, nil
}

// countRow runs a statement that answers one count.
func countRow(ctx context.Context, db pg.Querier, sql string, args ...any) (int, error) {
	var n int
	err := db.QueryRow(ctx, sql, args...).Scan(&n)
	return n, pg.MapError(err)
}
