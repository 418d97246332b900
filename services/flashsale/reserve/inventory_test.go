package reserve

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// invariants are this layer's own (the orders layer is not under test here).
var invariants = invariant.MustRegistry(invariant.Core, Invariants)

// bundle is one test's database and inventory.
type bundle struct {
	pool   *pgxpool.Pool
	inv    *Inventory
	faults *faults.Set
}

const sku = "sku-lab-01"

// setup returns an inventory over a fresh database with units of sku-lab-01.
func setup(t *testing.T, units int) bundle {
	t.Helper()
	b := bundle{pool: pgtest.New(t), faults: faults.New()}
	b.inv = NewInventory(InventoryOptions{HoldTTL: time.Minute, Faults: b.faults})
	created, err := b.inv.CreateSKU(context.Background(), b.pool, sku, units)
	require.NoError(t, err)
	require.True(t, created)
	return b
}

func (b bundle) hold(t *testing.T, user, key string) Reservation {
	t.Helper()
	r, created, err := b.inv.Hold(context.Background(), b.pool, HoldRequest{UserID: user, SKU: sku, RequestKey: key})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, StateHeld, r.State)
	return r
}

func (b bundle) get(t *testing.T, id int64) Reservation {
	t.Helper()
	r, err := b.inv.Get(context.Background(), b.pool, id)
	require.NoError(t, err)
	return r
}

func (b bundle) stock(t *testing.T) Stock {
	t.Helper()
	s, err := b.inv.stockOf(context.Background(), b.pool, sku)
	require.NoError(t, err)
	return s
}

// inTx runs fn in one transaction of the caller, as an order would.
func (b bundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) error {
	t.Helper()
	return pg.InTx(context.Background(), b.pool, fn)
}

// expire cuts every HELD reservation's hold short, as if its TTL passed.
func (b bundle) expire(t *testing.T) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE state = 'HELD'`)
	require.NoError(t, err)
}

func TestHoldAnswersReplayReuseUnknownHoldingAndSoldOut(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	r := b.hold(t, "user-0042", "k-1")

	again, created, err := b.inv.Hold(ctx, b.pool, HoldRequest{UserID: "user-0042", SKU: sku, RequestKey: "k-1"})
	require.NoError(t, err)
	require.False(t, created, "a replay")
	require.Equal(t, r, again)

	for name, tc := range map[string]struct {
		req  HoldRequest
		want error
	}{
		"key of another user":  {HoldRequest{UserID: "user-0043", SKU: sku, RequestKey: "k-1"}, errRequestKeyReused},
		"unknown sku":          {HoldRequest{UserID: "user-0043", SKU: "sku-lab-99", RequestKey: "k-2"}, errUnknownSKU},
		"already holding":      {HoldRequest{UserID: "user-0042", SKU: sku, RequestKey: "k-3"}, ErrAlreadyHolding},
		"malformed sku":        {HoldRequest{UserID: "user-0043", SKU: "SKU 1", RequestKey: "k-4"}, errInvalidSKU},
		"empty key":            {HoldRequest{UserID: "user-0043", SKU: sku, RequestKey: ""}, errRequestKeyMissing},
		"key with a space":     {HoldRequest{UserID: "user-0043", SKU: sku, RequestKey: "k 5"}, errInvalidRequestKey},
		"key of 256 bytes":     {HoldRequest{UserID: "user-0043", SKU: sku, RequestKey: string(make([]byte, 256))}, errInvalidRequestKey},
		"hold without a user":  {HoldRequest{SKU: sku, RequestKey: "k-6"}, errNoUser},
		"replay for other sku": {HoldRequest{UserID: "user-0042", SKU: "sku-lab-99", RequestKey: "k-1"}, errRequestKeyReused},
	} {
		_, _, err := b.inv.Hold(ctx, b.pool, tc.req)
		require.ErrorIs(t, err, tc.want, name)
	}
	b.hold(t, "user-0043", "k-7")
	_, _, err = b.inv.Hold(ctx, b.pool, HoldRequest{UserID: "user-0044", SKU: sku, RequestKey: "k-8"})
	require.ErrorIs(t, err, ErrSoldOut)

	require.Equal(t, Stock{SKU: sku, Stock: 2, Available: 0, Held: 2}, b.stock(t))
	invariants.Assert(t, b.pool, Module)
}

// The precheck is only a hint: when two holds of one user race past it,
// the partial unique index decides (FS-R3); when one key races itself,
// the request-key constraint turns the loser into a replay (FS-R2).
func TestRacingHoldsAreDecidedByTheConstraints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		secondKey  string
		wantErr    error
		wantReplay bool
	}{
		{"one user, two keys", "k-second", ErrAlreadyHolding, false},
		{"one key, twice", "k-first", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 5)
			ctx := context.Background()
			gate := b.faults.Pause(PointHoldBeforeCommit, "k-first")
			first := make(chan Reservation, 1)
			go func() { first <- b.hold(t, "user-0042", "k-first") }()
			<-gate.Reached() // the first hold has run, uncommitted: the precheck cannot see it

			second := make(chan error, 1)
			var got Reservation
			var created bool
			go func() {
				var err error
				got, created, err = b.inv.Hold(ctx, b.pool, HoldRequest{UserID: "user-0042", SKU: sku, RequestKey: tc.secondKey})
				second <- err
			}()
			require.Eventually(t, func() bool { // the second hold waits on the first's SKU row
				var n int
				_ = b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
				return n == 1
			}, 10*time.Second, time.Millisecond)
			gate.Release()
			r := <-first
			err := <-second
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				require.False(t, created)
				require.Equal(t, r, got)
			}
			var n int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM flashsale_reservation`).Scan(&n))
			require.Equal(t, 1, n)
			require.Equal(t, 4, b.stock(t).Available, "the loser's take was undone with its statement")
			invariants.Assert(t, b.pool, Module)
		})
	}
}

func TestConfirmMovesAHoldOnceAndLeavesTheStock(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	r := b.hold(t, "user-0042", "k-1")
	b.expire(t) // past its expiry, not yet released: still its unit
	for want := range []bool{true, false} {
		var moved bool
		require.NoError(t, b.inTx(t, func(tx pgx.Tx) (err error) {
			moved, err = b.inv.Confirm(context.Background(), tx, r.ID)
			return err
		}))
		require.Equal(t, want == 0, moved)
	}
	got := b.get(t, r.ID)
	require.Equal(t, StateConfirmed, got.State)
	require.NotNil(t, got.ConfirmedAt)
	require.Equal(t, Stock{SKU: sku, Stock: 3, Available: 2, Confirmed: 1}, b.stock(t))

	n, err := b.inv.releaseDue(context.Background(), b.pool, 10)
	require.NoError(t, err)
	require.Zero(t, n, "a confirmed reservation is never released")
	err = b.inTx(t, func(tx pgx.Tx) error { _, err := b.inv.Confirm(context.Background(), tx, 999); return err })
	require.ErrorIs(t, err, errNotFound)
	invariants.Assert(t, b.pool, Module)
}

// A confirmation in flight holds the reservation's row: the release job
// skips it, and the confirmation wins.
func TestReleaseSkipsAHoldBeingConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ctx := context.Background()
	r := b.hold(t, "user-0042", "k-1")
	b.expire(t)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	moved, err := b.inv.Confirm(ctx, tx, r.ID)
	require.NoError(t, err)
	require.True(t, moved)

	n, err := b.inv.releaseDue(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, tx.Commit(ctx))
	n, err = b.inv.releaseDue(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, StateConfirmed, b.get(t, r.ID).State)
	invariants.Assert(t, b.pool, Module)
}

// ORD-O4's inventory half: a payment that succeeds after its hold was
// released takes a free unit again (once), and is refused without any
// change when none is free or the user holds another.
func TestRetakeAfterReleaseTakesAFreeUnitOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	r := b.hold(t, "user-0042", "k-1")
	b.expire(t)
	n, err := b.inv.releaseDue(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	var confirmed, first, second bool
	require.NoError(t, b.inTx(t, func(tx pgx.Tx) (err error) {
		if confirmed, err = b.inv.Confirm(ctx, tx, r.ID); err != nil {
			return err
		}
		if first, err = b.inv.Retake(ctx, tx, r.ID); err != nil {
			return err
		}
		second, err = b.inv.Retake(ctx, tx, r.ID)
		return err
	}))
	require.False(t, confirmed, "released: nothing to confirm")
	require.True(t, first)
	require.False(t, second, "a repeat takes nothing")
	got := b.get(t, r.ID)
	require.Equal(t, StateConfirmed, got.State)
	require.NotNil(t, got.ReleasedAt)
	require.NotNil(t, got.RetakenAt)
	require.Equal(t, Stock{SKU: sku, Stock: 2, Available: 1, Confirmed: 1}, b.stock(t))
	invariants.Assert(t, b.pool, Module)
}

func TestRetakeRefusalsChangeNothingAndKeepTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		units int
		// after releases the first hold of user-0042, arranges the refusal.
		after func(t *testing.T, b bundle)
		want  error
	}{
		{"sold out", 1, func(t *testing.T, b bundle) { b.hold(t, "user-0043", "k-other") }, ErrSoldOut},
		{"holding another", 2, func(t *testing.T, b bundle) { b.hold(t, "user-0042", "k-again") }, ErrAlreadyHolding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.units)
			ctx := context.Background()
			r := b.hold(t, "user-0042", "k-1")
			b.expire(t)
			_, err := b.inv.releaseDue(ctx, b.pool, 10)
			require.NoError(t, err)
			tc.after(t, b)
			before := b.stock(t)

			var retakeErr error
			require.NoError(t, b.inTx(t, func(tx pgx.Tx) error {
				_, retakeErr = b.inv.Retake(ctx, tx, r.ID)
				// The caller goes on in the same transaction (records a refund).
				_, err := tx.Exec(ctx, `SELECT 1`)
				return err
			}))
			require.ErrorIs(t, retakeErr, tc.want)
			require.Equal(t, StateReleased, b.get(t, r.ID).State)
			require.Equal(t, before, b.stock(t))
			invariants.Assert(t, b.pool, Module)
		})
	}
}

func TestReleaseReturnsAHoldsUnitOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	r := b.hold(t, "user-0042", "k-1")
	for want := range []bool{true, false} {
		var moved bool
		require.NoError(t, b.inTx(t, func(tx pgx.Tx) (err error) {
			moved, err = b.inv.Release(ctx, tx, r.ID)
			return err
		}))
		require.Equal(t, want == 0, moved)
	}
	require.Equal(t, StateReleased, b.get(t, r.ID).State)
	require.Equal(t, Stock{SKU: sku, Stock: 1, Available: 1}, b.stock(t))
	n, err := b.inv.releaseDue(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	invariants.Assert(t, b.pool, Module)
}

// The database refuses what no code path may do, whoever tries: a second
// return of a unit (FS-R5), a move backwards in the state machine, a
// rewritten or deleted reservation, an edited stock log, oversold stock.
func TestSchemaRefusesIllegalWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	r := b.hold(t, "user-0042", "k-1")
	require.NoError(t, b.inTx(t, func(tx pgx.Tx) error { _, err := b.inv.Release(ctx, tx, r.ID); return err }))
	id := fmt.Sprint(r.ID)
	for _, sql := range []string{
		`INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta) VALUES ('sku-lab-01', ` + id + `, 'release', 1)`,
		`UPDATE flashsale_reservation SET state = 'HELD', released_at = NULL WHERE id = ` + id,
		`UPDATE flashsale_reservation SET released_at = now() + interval '1 second' WHERE id = ` + id,
		`UPDATE flashsale_reservation SET user_id = 'user-0043' WHERE id = ` + id,
		`DELETE FROM flashsale_reservation WHERE id = ` + id,
		`UPDATE flashsale_stock_move SET delta = 1 WHERE reservation_id = ` + id,
		`DELETE FROM flashsale_stock_move WHERE reservation_id = ` + id,
		`UPDATE flashsale_sku SET available = available + 1`,
		`UPDATE flashsale_sku SET available = -1`,
		`INSERT INTO flashsale_reservation (sku, user_id, request_key, state, expires_at) VALUES ('sku-lab-01', 'u', 'k-x', 'CONFIRMED', now())`,
	} {
		_, err := b.pool.Exec(ctx, sql)
		require.Error(t, err, sql)
		var ce *pg.ConstraintError
		require.True(t, errors.As(pg.MapError(err), &ce), "%s: %v", sql, err)
	}
	invariants.Assert(t, b.pool, Module)
}

func TestConfigRefusesALimitBeyondThePool(t *testing.T) {
	t.Parallel()
	cfg := app.Defaults()
	cfg.Settings = map[string]string{EnvLimit: "13"}
	_, err := LoadConfig(cfg)
	require.ErrorContains(t, err, EnvLimit)
	cfg.Settings = map[string]string{EnvWaitLine: "-1"}
	_, err = LoadConfig(cfg)
	require.Error(t, err)
	cfg.Settings = map[string]string{envHoldTTL: "90s", EnvLimit: "12"}
	c, err := LoadConfig(cfg)
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, c.HoldTTL)
	require.Equal(t, 12, c.Limit)
}
