package reserve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
)

// Experiments are the reservations chapter's runnable claims.
var Experiments = []lab.Experiment{FiveHundredBuyers}

// labSKU is the sale the experiments open: the book's 40 units.
const (
	labSKU   = "sku-lab-01"
	labUnits = 40
)

// FiveHundredBuyers is FS-01: 500 buyers, each its own HTTP request in its
// own goroutine, released at once on 40 units. Every buyer keeps its
// request key and retries a 503 until an answer settles it. Exactly 40 are
// told 201 HELD, the other 460 409 sold_out; nothing else is ever answered.
//
// The naive version is the book's check-then-insert: read `available`,
// decide in Go that a unit is left, write `available = read − 1` and insert
// the reservation. Sixty buyers all read 40 before anyone writes: sixty
// holds on forty units, and FS-R1 reports the oversold SKU.
var FiveHundredBuyers = lab.Experiment{
	ID:         "reservations/five-hundred-buyers",
	Test:       "TestFS01FiveHundredBuyersFortyUnitsExactlyFortyHolds",
	Claim:      "500 buyers released at once on 40 units: exactly 40 holds, 460 sold_out, no oversell, admission bounded",
	Invariants: []string{Module},
	Naive:      "check-then-insert: read available, decide in Go, write available = read − 1 and insert the hold",
	Catches:    []string{"FS-R1"},
	Run:        runFiveHundredBuyers,
}

func runFiveHundredBuyers(x *lab.X) {
	a := x.Start(lab.Options{})
	_, err := NewInventory(InventoryOptions{}).CreateSKU(context.Background(), a.Pool, labSKU, labUnits)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("put %d units of %s on sale", labUnits, labSKU), Outcome: lab.Accepted})
	if x.Naive {
		naiveHolds(x, a, 60)
		return
	}
	const buyers = 500
	type outcome struct {
		status   int
		code     string
		overload int // 503s before the final answer
		err      error
	}
	out := make([]outcome, buyers)
	gate := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range buyers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			actor := fmt.Sprintf("buyer-%03d", i+1)
			tok := a.Token(x, fmt.Sprintf("user-%04d", i+1), httpx.RoleUser)
			key := fmt.Sprintf("fs01-%04d", i+1)
			ready.Done()
			<-gate
			for {
				r, err := a.Send(context.Background(), lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations",
					Token: tok, Body: ReserveRequest{SKU: labSKU, RequestKey: key}})
				if err == nil && r.Status == http.StatusServiceUnavailable && r.Code() == "overloaded" && r.Header.Get("Retry-After") != "" {
					out[i].overload++
					time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // a crowd more impatient than Retry-After
					continue
				}
				out[i].status, out[i].code, out[i].err = r.Status, r.Code(), err
				step := lab.Step{Actor: actor, Action: "hold 1 unit", Note: fmt.Sprintf("after %d × 503 overloaded", out[i].overload)}
				switch {
				case err != nil:
					step.Outcome, step.Note = "transport error", err.Error()
				case r.Status == http.StatusCreated:
					var res Reservation
					r.JSON(x, &res)
					step.Outcome, step.Note = "held", fmt.Sprintf("reservation %d, %s", res.ID, step.Note)
				default:
					step.Outcome = r.Code()
				}
				x.Step(step)
				return
			}
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()

	held, soldOut, overloaded := 0, 0, 0
	for i, o := range out {
		require.NoError(x, o.err, "buyer %d", i+1)
		overloaded += o.overload
		switch {
		case o.status == http.StatusCreated:
			held++
		case o.status == http.StatusConflict && o.code == "sold_out":
			soldOut++
		default:
			x.Fatalf("buyer %d: %d %s", i+1, o.status, o.code)
		}
	}
	peak := int(a.Gauge(x, "fencelab_flashsale_reservation_ops_in_db_peak"))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d HELD, %d available; at most %d holds ran in the database at once",
		a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`),
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU), peak)})
	x.Figure("buyers", buyers)
	x.Figure("held", held)
	x.Figure("sold_out", soldOut)
	x.Figure("overloaded_answers", overloaded)
	x.Figure("peak_in_db", peak)
	require.Equal(x, labUnits, held)
	require.Equal(x, buyers-labUnits, soldOut)
	require.Equal(x, labUnits, a.Count(x, `SELECT count(*) FROM flashsale_reservation`), "a refused request wrote nothing")
	require.Zero(x, a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU))
	require.LessOrEqual(x, peak, DefaultConfig().Limit)
}

// naiveHolds is check-then-insert, done by the experiment to the scratch
// database: the product's hold is one guarded statement (FS-R1).
func naiveHolds(x *lab.X, a *lab.App, buyers int) {
	ctx := context.Background()
	var wg, read sync.WaitGroup
	read.Add(buyers)
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actor := fmt.Sprintf("buyer-%03d", i+1)
			var available int
			err := a.Pool.QueryRow(ctx, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU).Scan(&available)
			read.Done()
			read.Wait() // everyone has looked before anyone writes
			if err != nil || available < 1 {
				x.Step(lab.Step{Actor: actor, Action: fmt.Sprintf("read available %d", available), Outcome: "sold_out"})
				return
			}
			tx, err := a.Pool.Begin(ctx)
			if err != nil {
				x.Errorf("%s: %v", actor, err)
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
			var id int64
			_, err = tx.Exec(ctx, `UPDATE flashsale_sku SET available = $2 WHERE sku = $1`, labSKU, available-1)
			if err == nil {
				err = tx.QueryRow(ctx, `INSERT INTO flashsale_reservation (sku, user_id, request_key, state, expires_at)
				                        VALUES ($1, $2, $3, 'HELD', now() + interval '5 minutes') RETURNING id`,
					labSKU, fmt.Sprintf("user-%04d", i+1), fmt.Sprintf("naive-%04d", i+1)).Scan(&id)
			}
			if err == nil {
				_, err = tx.Exec(ctx, `INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta) VALUES ($1, $2, 'hold', -1)`, labSKU, id)
			}
			if err == nil {
				err = tx.Commit(ctx)
			}
			step := lab.Step{Actor: actor, Action: fmt.Sprintf("read available %d, write %d, insert hold", available, available-1),
				Outcome: lab.Violates, Note: fmt.Sprintf("reservation %d", id)}
			if err != nil {
				step.Outcome, step.Note = "error", err.Error()
			}
			x.Step(step)
		}()
	}
	wg.Wait()
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d HELD on %d units, available %d",
		a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`), labUnits,
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU))})
}
