package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// moveStmt is the product's move statement, guard and all: the naive pay
// handler gives the order up exactly as the product's giveUp does. What it
// takes out is the reading of the answer, not the move.
var moveStmt = pg.MustNamed(order.SQLMove)

// naivePayHandler is the pay route as a naive author writes it: the
// product's pay call runs (the order moves to PAYING, the channel is asked
// to charge, its answer is recorded), and then "no answer is a failure":
// when the answer names no charge, the handler gives the order up —
// PAYING → FAILED on that report — and returns its unit, in one
// transaction, as the product does for a definite refusal. The product
// leaves such an order PAYING with its unit held, because no answer may
// hide a charge (ORD-O2).
type naivePayHandler struct {
	x *lab.X
	l *Lab
}

func (h *naivePayHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	idText, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/flashsale/orders/"), "/pay")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	// The product's own pay call, entered as the product is entered.
	resp, err := h.l.Send(r.Context(), PayReq(tok, id))
	if err != nil {
		h.x.Error("naive-pay", fmt.Sprintf("pay order %d", id), err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var o order.Order
	if resp.Status == http.StatusAccepted {
		// Decoded here, not through x: a handler goroutine must not stop
		// the run's goroutine, only report.
		if err := json.Unmarshal(resp.Body, &o); err != nil {
			h.x.Error("naive-pay", fmt.Sprintf("read the pay answer of order %d", id), err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	if resp.Status != http.StatusAccepted || o.EffectID != "" {
		// The channel answered (or the call was refused): nothing for the
		// naive reading to add.
		h.x.Step(lab.Step{Actor: "naive-pay", Action: fmt.Sprintf("pay order %d", id), Outcome: string(o.State),
			Note: "the channel answered: charge " + o.EffectID})
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
		return
	}
	report, at, err := h.giveUp(r.Context(), id)
	if err != nil {
		h.x.Error("naive-pay", fmt.Sprintf("give order %d up", id), err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h.x.Step(lab.Step{Actor: "naive-pay", Action: fmt.Sprintf("pay order %d: no answer, so failed", id), Outcome: string(order.StateFailed),
		Note: fmt.Sprintf("moved PAYING → FAILED on report %s and returned the unit", report), DBTime: at})
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, `{"id":%d,"state":%q}`, id, order.StateFailed)
}

// giveUp is the product's giveUp (order PAYING → FAILED on the report,
// the unit released in the same transaction) applied to the charge's
// report whatever it says. It returns the report it rested on and the
// database's time of its statement.
func (h *naivePayHandler) giveUp(ctx context.Context, id int64) (string, time.Time, error) {
	var report string
	var at time.Time
	err := pgx.BeginFunc(ctx, h.l.Pool, func(tx pgx.Tx) error {
		var reservationID, eventID int64
		var status string
		if err := tx.QueryRow(ctx, `
SELECT o.reservation_id, e.id, e.status, clock_timestamp()
  FROM flashsale_order o
  JOIN flashsale_payment_event e ON e.order_id = o.id AND e.source = $2
 WHERE o.id = $1
 ORDER BY e.id DESC LIMIT 1
   FOR UPDATE OF o`, id, order.SourceCharge).Scan(&reservationID, &eventID, &status, &at); err != nil {
			return fmt.Errorf("order %d and its charge report: %w", id, err)
		}
		report = fmt.Sprintf("%d (charge %s)", eventID, status)
		unit := "release"
		var applied bool
		if err := tx.QueryRow(ctx, moveStmt.SQL, moveStmt.Args(pgx.NamedArgs{
			"id": id, "from": order.StatePaying, "to": order.StateFailed, "unit": &unit,
			"cause": "naive pay: no answer taken for a failure", "effect_id": nil, "charged": nil,
			"charge_event_id": nil, "refunded": nil, "refund_event_id": nil, "paid_outbox_id": nil, "event_id": &eventID,
		})...).Scan(&applied); err != nil {
			return fmt.Errorf("move: %w", err)
		}
		if !applied {
			return fmt.Errorf("order %d was not PAYING", id)
		}
		moved, err := reserve.NewInventory(reserve.InventoryOptions{}).Release(ctx, tx, reservationID)
		if err == nil && !moved {
			err = fmt.Errorf("reservation %d was not held", reservationID)
		}
		return err
	})
	return report, at, err
}

// naiveChargeAnswerLost is ORD-01's naive version: the buyer pays through
// the naive pay handler and the channel's answer to the charge is lost
// (in the control it arrives). The naive handler fails the order and
// returns its unit; then the payment network settles the charge — the
// money is taken. ORD-O2 reports the move that gave the order up on a
// report that said nothing definite.
func naiveChargeAnswerLost(x *lab.X, l *Lab) {
	tok, res, o := l.Ordered(x, "user-0042", labSKU, "ord01-naive")

	srv := httptest.NewServer(&naivePayHandler{x: x, l: l})
	x.Cleanup(srv.Close)
	if !x.Control {
		l.Pay.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, DropResponse: true, Times: 1})
		x.Step(lab.Step{Actor: "channel", Action: "the answer to the next charge will be lost on the way back"})
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/flashsale/orders/"+itoa(o.ID)+"/pay", nil)
	require.NoError(x, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(x, err)
	_ = resp.Body.Close()

	// The channel's ledger is the ground truth for "money taken": its one
	// charge for the order, settled by the payment network. Its callback
	// is held back in both versions, so that reconciliation's query is
	// what settles the order in the control; in the naive run
	// reconciliation has no PAYING order left to ask about.
	ch := l.Charge(x, o)
	l.Pay.HoldCallbacks()
	require.NoError(x, l.Pay.Settle(ch.ID, fakeprovider.StatusSucceeded))
	charge := l.Charge(x, o)
	x.Step(lab.Step{Actor: "channel", Action: "settle charge " + charge.ID, Outcome: charge.Status,
		Note: fmt.Sprintf("%d taken from the buyer (callback held back)", charge.Amount)})
	l.Reconcile(x)
	v := l.View(x, tok, o.ID)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read order %d", o.ID), Outcome: string(v.State),
		Note: "applied moves: " + strings.Join(Applied(v), ", ")})
	x.Figure("charge", charge.Status)
	x.Figure("order", string(v.State))
	x.Figure("moves", Applied(v))
	if x.Control {
		require.Equal(x, order.StatePaid, v.State, "the answer arrived: the order waits PAYING and the success pays it")
		require.Equal(x, reserve.StateConfirmed, l.Reservation(x, res.ID).State)
		return
	}
	require.Equal(x, fakeprovider.StatusSucceeded, charge.Status, "the money is taken")
	require.Contains(x, Applied(v), "PAYING→FAILED", "the naive handler gave the order up")
}
