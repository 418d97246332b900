package reserve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// Fault points (armed by experiments; no-ops otherwise). The key is the
// request key for holds and the SKU for the release.
const (
	// PointHoldBeforeCommit: the hold statement ran inside its transaction
	// (a unit is taken, the SKU row is locked); the commit has not been
	// sent. A client that leaves here gets nothing: the hold rolls back.
	PointHoldBeforeCommit = "flashsale.hold.before_commit"
	// PointHoldAfterCommit: the hold committed; the answer has not been
	// sent. A client that leaves here finds its hold on retry (FS-R2).
	PointHoldAfterCommit = "flashsale.hold.after_commit"
	// PointReleaseBeforeCommit: a release batch has locked and released
	// its rows inside its transaction; the commit has not been sent.
	PointReleaseBeforeCommit = "flashsale.release.before_commit"
)

// DefaultHoldTTL is how long an unpaid hold keeps its unit.
const DefaultHoldTTL = 10 * time.Minute

// defaultReleaseBatch bounds the expired holds one release statement
// returns (and the rows it locks).
const defaultReleaseBatch = 500

// Inventory is the stock of the sale and every rule about it: a unit is
// taken only when one is available (FS-R1), one request key makes at most
// one reservation (FS-R2), a user holds at most one active reservation per
// SKU (FS-R3), and a unit comes back at most once (FS-R5). It is the only
// code that writes flashsale_sku, flashsale_reservation and
// flashsale_stock_move; orders (part B) build on it without changing it.
//
// Hold and releaseDue run their own transactions. Confirm, Retake and
// Release run inside the caller's transaction, so an order's state change
// and its inventory change commit together or not at all; each is one
// conditional statement that reports whether it moved anything, and a
// refusal leaves the caller's transaction usable.
type Inventory struct {
	holdTTL time.Duration
	faults  *faults.Set
}

// InventoryOptions configure NewInventory.
type InventoryOptions struct {
	HoldTTL time.Duration // default DefaultHoldTTL
	Faults  *faults.Set   // nil in production
}

// NewInventory returns the inventory rules.
func NewInventory(o InventoryOptions) *Inventory {
	if o.HoldTTL <= 0 {
		o.HoldTTL = DefaultHoldTTL
	}
	return &Inventory{holdTTL: o.HoldTTL, faults: o.Faults}
}

// poolDB is what Hold and releaseDue need: a pool (they run their own
// transactions).
type poolDB interface {
	pg.Querier
	pg.TxBeginner
}

// CreateSKU puts total units of sku on sale unless the SKU exists (then it
// is left as it is and created is false).
func (inv *Inventory) CreateSKU(ctx context.Context, db pg.Querier, sku string, total int) (created bool, err error) {
	if !validSKU(sku) {
		return false, errInvalidSKU
	}
	if total < 0 {
		return false, fmt.Errorf("flashsale: total must not be negative, got %d", total)
	}
	tag, err := db.Exec(ctx, sqlCreateSKU, sku, total)
	if err != nil {
		return false, fmt.Errorf("flashsale: create sku %s: %w", sku, pg.MapError(err))
	}
	return tag.RowsAffected() == 1, nil
}

// Hold reserves one unit of h.SKU for h.UserID under h.RequestKey, in one
// transaction: the unit is taken and the reservation recorded together or
// not at all. A request key that already made a reservation for this user
// and SKU returns that reservation with created = false, whatever its
// state now (FS-R2); for another user or SKU it is errRequestKeyReused.
// Other refusals: errUnknownSKU, ErrAlreadyHolding (FS-R3), ErrSoldOut
// (FS-R1).
//
// If ctx ends before the commit is sent, the transaction rolls back and
// nothing was reserved; if it ends after, the hold stands and a retry with
// the same key returns it. Either way one key, at most one reservation.
func (inv *Inventory) Hold(ctx context.Context, db poolDB, h HoldRequest) (r Reservation, created bool, err error) {
	if err := h.Validate(); err != nil {
		return Reservation{}, false, err
	}
	p, err := readPrecheck(ctx, db, h)
	if err != nil {
		return Reservation{}, false, err
	}
	switch {
	case p.keyID != nil:
		return inv.replay(ctx, db, h)
	case p.available == nil:
		return Reservation{}, false, fmt.Errorf("%w: %s", errUnknownSKU, h.SKU)
	case p.holdingID != nil:
		return Reservation{}, false, fmt.Errorf("%w: reservation %d", ErrAlreadyHolding, *p.holdingID)
	case *p.available == 0:
		// Sold out at this snapshot: refused without a lock or a write,
		// which is how most requests of a sale are answered.
		return Reservation{}, false, fmt.Errorf("%w: %s", ErrSoldOut, h.SKU)
	}

	err = pg.InTx(ctx, db, func(tx pgx.Tx) error {
		held, found, err := insertHold(ctx, tx, h, inv.holdTTL)
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("%w: %s", ErrSoldOut, h.SKU) // the last units went to holds that got the row first
		}
		r = held
		return inv.faults.Hit(ctx, PointHoldBeforeCommit, h.RequestKey)
	})
	switch c := pg.Constraint(err); {
	case err == nil:
	case c == constraintRequestKey:
		// A concurrent request with this key committed first.
		return inv.replay(ctx, db, h)
	case c == constraintOneActive:
		return Reservation{}, false, fmt.Errorf("%w: %s", ErrAlreadyHolding, h.SKU)
	default:
		return Reservation{}, false, err
	}
	if err := inv.faults.Hit(ctx, PointHoldAfterCommit, h.RequestKey); err != nil {
		return Reservation{}, false, err
	}
	return r, true, nil
}

// replay answers a request key that already made a reservation (FS-R2).
func (inv *Inventory) replay(ctx context.Context, db pg.Querier, h HoldRequest) (Reservation, bool, error) {
	r, found, err := getByKey(ctx, db, h.RequestKey)
	switch {
	case err != nil:
		return Reservation{}, false, err
	case !found:
		// The key's reservation is never deleted, so this cannot happen;
		// say so rather than guess.
		return Reservation{}, false, fmt.Errorf("flashsale: reservation of request key vanished")
	case r.UserID != h.UserID || r.SKU != h.SKU:
		return Reservation{}, false, errRequestKeyReused
	}
	return r, false, nil
}

// Get reads a reservation (errNotFound when there is none).
func (inv *Inventory) Get(ctx context.Context, db pg.Querier, id int64) (Reservation, error) {
	return getReservation(ctx, db, id)
}

// GetForUpdate reads a reservation and locks it until tx ends: no state
// change can happen to it meanwhile (the release job skips it and takes
// it on its next run).
func (inv *Inventory) GetForUpdate(ctx context.Context, tx pgx.Tx, id int64) (Reservation, error) {
	r, err := scanReservation(tx.QueryRow(ctx, sqlGet+` FOR UPDATE`, id))
	if err = pg.MapError(err); err != nil {
		if errors.Is(err, pg.ErrNotFound) {
			return Reservation{}, fmt.Errorf("%w: %d", errNotFound, id)
		}
		return Reservation{}, fmt.Errorf("flashsale: lock reservation %d: %w", id, err)
	}
	return r, nil
}

// stockOf reads a SKU's stock, available, held and confirmed units in one
// snapshot (errUnknownSKU when there is no such SKU).
func (inv *Inventory) stockOf(ctx context.Context, db pg.Querier, sku string) (Stock, error) {
	if !validSKU(sku) {
		return Stock{}, fmt.Errorf("%w: %s", errUnknownSKU, sku)
	}
	return readStock(ctx, db, sku)
}

// Confirm moves a HELD reservation to CONFIRMED inside tx (a payment
// succeeded) and reports whether it moved. The unit was taken at hold
// time, so the stock does not change. A hold past its expiry that the
// release job has not reached yet still owns its unit and is confirmed.
// moved = false means the reservation is not HELD (already confirmed, or
// released: see Retake); errNotFound means there is no such reservation.
func (inv *Inventory) Confirm(ctx context.Context, tx pgx.Tx, id int64) (moved bool, err error) {
	tag, err := tx.Exec(ctx, sqlConfirm, id)
	if err != nil {
		return false, fmt.Errorf("flashsale: confirm %d: %w", id, pg.MapError(err))
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	_, err = getReservation(ctx, tx, id)
	return false, err
}

// Retake is for a payment that succeeded after its hold was released
// (ORD-O4): inside tx, if a unit of the SKU is free, take it and move the
// RELEASED reservation to CONFIRMED. moved = false means the reservation
// is not RELEASED (a repeat: already retaken or confirmed; or still HELD:
// use Confirm). ErrSoldOut: no unit is free; ErrAlreadyHolding: the user
// meanwhile holds another reservation of the SKU (FS-R3); in both cases
// nothing changed and tx is still usable (the caller refunds).
func (inv *Inventory) Retake(ctx context.Context, tx pgx.Tx, id int64) (moved bool, err error) {
	// A savepoint, so that FS-R3's unique violation undoes only this.
	err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		var sku string
		err := sp.QueryRow(ctx, sqlLockReleased, id).Scan(&sku)
		if errors.Is(pg.MapError(err), pg.ErrNotFound) {
			_, err = getReservation(ctx, sp, id) // not RELEASED: moved = false, or no such reservation
			return err
		}
		if err != nil {
			return err
		}
		n, err := countRow(ctx, sp, sqlRetake, id, sku)
		switch {
		case err != nil:
			return err
		case n == 0:
			return fmt.Errorf("%w: %s", ErrSoldOut, sku)
		}
		moved = true
		return nil
	})
	if err != nil {
		if pg.Constraint(err) == constraintOneActive {
			return false, ErrAlreadyHolding
		}
		return false, fmt.Errorf("flashsale: retake %d: %w", id, pg.MapError(err))
	}
	return moved, nil
}

// Release returns the unit of a HELD reservation now, whatever its expiry
// (an order that definitely failed), inside tx. moved = false means it
// was not HELD; the unit comes back at most once (FS-R5).
func (inv *Inventory) Release(ctx context.Context, tx pgx.Tx, id int64) (moved bool, err error) {
	n, err := countRow(ctx, tx, sqlRelease, id)
	if err != nil {
		return false, fmt.Errorf("flashsale: release %d: %w", id, err)
	}
	if n == 1 {
		return true, nil
	}
	_, err = getReservation(ctx, tx, id)
	return false, err
}

// releaseDue returns the unit of every HELD reservation whose expiry
// has passed, in batches of at most batch per statement, and reports how
// many it returned. Each unit comes back exactly once however many runs
// race (FS-R5): concurrent runs skip each other's locked rows, and a row
// released by another run no longer matches.
func (inv *Inventory) releaseDue(ctx context.Context, db poolDB, batch int) (int, error) {
	if batch <= 0 {
		batch = defaultReleaseBatch
	}
	skus, err := dueSKUs(ctx, db)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, sku := range skus {
		for {
			var n int
			err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
				if n, err = countRow(ctx, tx, sqlReleaseExpired, sku, batch); err != nil {
					return err
				}
				return inv.faults.Hit(ctx, PointReleaseBeforeCommit, sku)
			})
			if err != nil {
				return total, fmt.Errorf("flashsale: release expired holds of %s: %w", sku, err)
			}
			total += n
			if n < batch {
				break
			}
		}
	}
	return total, nil
}
