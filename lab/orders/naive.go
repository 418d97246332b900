package orders

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// naiveMoveStmt is the product's move (order.SQLMove) minus its state
// condition: the UPDATE no longer waits to find the order PAYING, so a
// success applied before is applied again (ORD-O1, ORD-O3). Everything
// else — the logged transition, the money and evidence columns — is the
// product's statement.
var naiveMoveStmt = pg.MustNamed(mustCut(order.SQLMove, " AND state = @from::text"))

func mustCut(s, guard string) string {
	if !strings.Contains(s, guard) {
		panic("lab/orders: the product's move no longer has the guard " + guard)
	}
	return strings.Replace(s, guard, "", 1)
}

// naiveCallbackWindow is the signature window the naive handler checks,
// as the product's default does: the naive handler authenticates (ORD-O5
// is not what this version takes out).
const naiveCallbackWindow = 5 * time.Minute

// naiveSuccessDeliveries is ORD-02's naive version: the channel's
// callbacks go to a handler without the inbox, and the channel delivers
// the one success five times (once in the control). Each delivery is
// verified as the product verifies it, recorded, and applied with the
// product's move minus its state condition, the unit confirmed and an
// order_paid event appended as the product's success does.
func naiveSuccessDeliveries(x *lab.X, l *Lab) {
	tok, _, o := l.Ordered(x, "user-0042", labSKU, "ord02-naive")
	ch := l.PayPending(x, tok, o.ID)

	ctx := context.Background()
	// The naive schema: without the inbox there is no unique callback key;
	// without the state condition the order guard trigger (which lets
	// evidence change only with a move) and the CHECK that an applied move
	// found its from-state would refuse the repeat. ORD-S1 reports the
	// schema; what catches the run is the data the deliveries write.
	_, err := l.Pool.Exec(ctx, `ALTER TABLE flashsale_payment_event DROP CONSTRAINT flashsale_payment_event_inbox;
ALTER TABLE flashsale_order_transition DROP CONSTRAINT flashsale_order_transition_refusal;
ALTER TABLE flashsale_order DISABLE TRIGGER flashsale_order_guard`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: the callback inbox key and the applied-move CHECK dropped, the order guard trigger disabled"})

	h := &naiveHandler{x: x, l: l}
	srv := httptest.NewServer(h)
	x.Cleanup(srv.Close)
	l.Pay.SetCallbackURL(srv.URL + order.CallbackPath)
	deliveries := 5
	if x.Control {
		deliveries = 1
	}
	// The channel redelivers a callback as a real one does when it is not
	// sure it arrived: the same event, the same bytes, signed afresh.
	l.Pay.DuplicateCallbacks(deliveries - 1)
	l.Settle(x, ch.ID, fakeprovider.StatusSucceeded)
	l.Pay.DuplicateCallbacks(0)

	got := 0
	for _, d := range l.Pay.Deliveries() {
		if d.Type == order.CallbackSucceeded && d.Status == http.StatusOK {
			got++
		}
	}
	require.Equal(x, deliveries, got, "the channel delivered the success %d times", deliveries)
	require.Equal(x, deliveries, h.applied, "every delivery reached the naive handler and was applied")

	moves := l.Count(x, `SELECT count(*) FROM flashsale_order_transition WHERE order_id = $1 AND applied AND to_state = 'PAID'`, o.ID)
	events := l.PaidEvents(x, o.ID)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read order %d", o.ID),
		Note: fmt.Sprintf("%d moves into PAID, %d order_paid events", moves, events)})
	x.Figure("deliveries", got)
	x.Figure("moves_into_paid", moves)
	x.Figure("order_paid_events", events)
}

// naiveHandler is the callback route without its inbox.
type naiveHandler struct {
	x       *lab.X
	l       *Lab
	applied int // deliveries applied (the channel delivers one at a time)
}

func (h *naiveHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, order.MaxCallbackBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	header := r.Header.Get(fakeprovider.SignatureHeader)
	verifiedAt := time.Now()
	if err := fakeprovider.Verify([]byte(LabSecret), header, body, verifiedAt, naiveCallbackWindow); err != nil {
		h.x.Error("naive-handler", "verify callback", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var cb fakeprovider.Callback
	if err := json.Unmarshal(body, &cb); err != nil {
		h.x.Error("naive-handler", "parse callback", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := fmt.Sprintf("callback %s %s (delivery %d)", cb.Type, cb.ID, h.applied+1)
	applied, err := h.apply(r.Context(), cb, body, header, verifiedAt)
	if err != nil {
		h.x.Error("naive-handler", action, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h.applied++
	outcome := lab.Refused
	if applied {
		outcome = "applied"
	}
	h.x.Step(lab.Step{Actor: "naive-handler", Action: action, Outcome: outcome,
		Note: "no inbox to say it was seen; the move does not check the state"})
	w.WriteHeader(http.StatusOK)
}

// apply is the product's success path for a held unit (order.Service's
// applyCharge) without its guards: no inbox lookup, and the move minus its
// state condition. It reports whether the move applied.
func (h *naiveHandler) apply(ctx context.Context, cb fakeprovider.Callback, body []byte, header string, verifiedAt time.Time) (bool, error) {
	var applied bool
	err := pgx.BeginFunc(ctx, h.l.Pool, func(tx pgx.Tx) error {
		var id, reservationID, amount int64
		var user, sku string
		if err := tx.QueryRow(ctx, `SELECT id, reservation_id, amount, user_id, sku FROM flashsale_order WHERE pay_ref = $1 FOR UPDATE`,
			cb.Effect.Reference).Scan(&id, &reservationID, &amount, &user, &sku); err != nil {
			return fmt.Errorf("order of %s: %w", cb.Effect.Reference, err)
		}
		// The report, recorded as the product records a verified callback —
		// but with no inbox key, so a redelivery is a new report.
		sum := sha256.Sum256(body)
		var eventID int64
		if err := tx.QueryRow(ctx, `
INSERT INTO flashsale_payment_event (order_id, source, provider_event_id, event_type, effect_id, status, amount, refunded,
                                     body_sha256, signed_at, verified_at, window_seconds)
VALUES ($1, 'callback', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
			id, cb.ID, cb.Type, cb.Effect.ID, cb.Effect.Status, cb.Effect.Amount, cb.Effect.Refunded,
			sum[:], signedAt(header), verifiedAt, int(naiveCallbackWindow/time.Second)).Scan(&eventID); err != nil {
			return fmt.Errorf("record callback: %w", err)
		}
		paid, err := outbox.Append(ctx, tx, order.TopicOrderPaid, strconv.FormatInt(id, 10), order.PaidEvent{
			OrderID: id, ReservationID: reservationID, UserID: user, SKU: sku, Amount: amount, EffectID: cb.Effect.ID})
		if err != nil {
			return err
		}
		unit := "confirm"
		if err := tx.QueryRow(ctx, naiveMoveStmt.SQL, naiveMoveStmt.Args(pgx.NamedArgs{
			"id": id, "from": order.StatePaying, "to": order.StatePaid, "unit": &unit,
			"cause": "naive callback " + cb.ID, "effect_id": &cb.Effect.ID, "charged": &cb.Effect.Amount,
			"charge_event_id": &eventID, "refunded": nil, "refund_event_id": nil, "paid_outbox_id": &paid, "event_id": &eventID,
		})...).Scan(&applied); err != nil {
			return fmt.Errorf("move: %w", err)
		}
		// The product confirms the unit with the move; a repeat finds it
		// confirmed already and the naive handler does not look.
		_, err = reserve.NewInventory(reserve.InventoryOptions{}).Confirm(ctx, tx, reservationID)
		return err
	})
	return applied, err
}

// signedAt is the t= of a verified Fake-Signature header: a copy, on
// purpose, of the product's own (signedAt in services/flashsale/order,
// unexported), so that the naive handler records the same evidence.
func signedAt(header string) time.Time {
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			sec, _ := strconv.ParseInt(v, 10, 64)
			return time.Unix(sec, 0)
		}
	}
	return time.Time{}
}
