package reservations

// The reservations chapter under every schedule (fencelab lab explore
// reservations/five-hundred-buyers): two buyers on the last unit.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// lastUnitSKU is the sale the exploration opens: one unit left.
const lastUnitSKU = "sku-lab-last"

// lastUnitExplore: buyers A and B want the last unit. Guarded, each runs
// the product's Hold — step "hold" up to its before_commit point (the
// conditional UPDATE has taken the unit inside the transaction), step
// "commit" — and a hold queued behind the other's uncommitted one finds
// the unit gone when it is granted the row: one hold in every schedule,
// FS-R1 holds. Naive (check-then-insert), a buyer that read 1 before the
// other committed writes available = 0 and inserts its hold as well: the
// schedules where both hold before either commits oversell.
var lastUnitExplore = &lab.Explore{
	Claim: "two buyers on the last unit, each hold → commit: under every schedule exactly one holds it and the SKU is never oversold",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("hold", "commit")},
		{Name: "B", Steps: lab.Steps("hold", "commit")},
	},
	Run: exploreLastUnit,
}

func exploreLastUnit(x *lab.X) {
	db := x.Database()
	fs := faults.New()
	inv := reserve.NewInventory(reserve.InventoryOptions{Faults: fs})
	pool := labkit.Pool(x, db)
	_, err := inv.CreateSKU(context.Background(), pool, lastUnitSKU, 1)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "admin", Action: "put 1 unit of " + lastUnitSKU + " on sale", Outcome: lab.Accepted})
	// The product's before_commit point is the boundary between a hold's
	// two steps: the unit is taken inside the transaction, not committed.
	x.StepAt(fs, reserve.PointHoldBeforeCommit, "commit")
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		pool := a.Pool(db)
		user, key := "user-"+a.Name, "last-unit-"+a.Name
		a.Step("hold")
		if x.Naive {
			naiveHoldSteps(x, a, pool, user, key)
			return
		}
		r, _, err := inv.Hold(ctx, pool, reserve.HoldRequest{UserID: user, SKU: lastUnitSKU, RequestKey: key})
		switch {
		case err == nil:
			a.Say("hold → commit", lab.Accepted, fmt.Sprintf("reservation %d", r.ID))
		case errors.Is(err, reserve.ErrSoldOut):
			a.Say("hold", "sold_out", "the unit went to the other buyer's hold")
		default:
			x.Error(a.Name, "hold", err)
		}
	})
	var held, available int
	require.NoError(x, pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM flashsale_reservation WHERE sku = $1 AND state = 'HELD'),
	       (SELECT available FROM flashsale_sku WHERE sku = $1)`, lastUnitSKU).Scan(&held, &available))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d HELD on 1 unit, available %d", held, available)})
	x.Figure("held", held)
	if !x.Naive {
		require.Equal(x, 1, held, "exactly one buyer holds the last unit")
	}
}

// naiveHoldSteps is the book's check-then-insert, in the same two steps:
// "hold" reads available, decides in Go and writes available = read − 1
// and the hold inside a transaction; "commit" commits it.
func naiveHoldSteps(x *lab.X, a *lab.Actor, pool *pgxpool.Pool, user, key string) {
	ctx := a.Context()
	var available int
	if err := pool.QueryRow(ctx, `SELECT available FROM flashsale_sku WHERE sku = $1`, lastUnitSKU).Scan(&available); err != nil {
		x.Error(a.Name, "read available", err)
		return
	}
	if available < 1 {
		a.Say(fmt.Sprintf("read available %d", available), "sold_out", "checked in Go")
		return
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		x.Error(a.Name, "begin", err)
		return
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	id, err := naiveHold(ctx, tx, lastUnitSKU, available, user, key)
	action := fmt.Sprintf("read available %d, write %d, insert hold", available, available-1)
	if err != nil {
		x.Error(a.Name, action, err)
		return
	}
	a.Say(action, lab.Accepted, fmt.Sprintf("reservation %d, not committed", id))
	a.Step("commit")
	if err := tx.Commit(ctx); err != nil {
		x.Error(a.Name, "commit", err)
		return
	}
	a.Say("commit", "", "")
}
