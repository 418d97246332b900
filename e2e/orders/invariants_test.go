package orders_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/e2e/e2etest"
	orders "github.com/fencelab/fencelab/lab/orders"
	"github.com/fencelab/fencelab/services/flashsale"
	"github.com/fencelab/fencelab/services/flashsale/order"
)

// The ORD invariants are not vacuous: after a clean run they hold; rows
// that no code path writes — broken by hand, past the constraints and
// triggers that normally refuse them — are each reported.
func TestORDInvariantsReportRowsThatBreakThem(t *testing.T) {
	l := e2etest.StartLab(t, orders.StartLab, e2etest.Options{})
	ctx := context.Background()
	tok, tok2 := l.User(t, "user-0042"), l.User(t, "user-0043")
	paid := l.Order(t, tok, l.Reserve(t, tok, flashsale.DemoSKU, "inv-0042").ID)
	l.Settle(t, l.PayPending(t, tok, paid.ID).ID, fakeprovider.StatusSucceeded)
	paying := l.Order(t, tok2, l.Reserve(t, tok2, flashsale.DemoSKU, "inv-0043").ID)
	l.PayPending(t, tok2, paying.ID)
	l.AssertSettled(t)
	pendingEvent := l.View(t, tok2, paying.ID).PaymentEvents[0].ID

	for _, sql := range []string{
		// ORD-O1: an applied move the machine does not have.
		`INSERT INTO flashsale_order_transition (order_id, from_state, to_state, applied, found_state, cause)
		 VALUES (` + fmt.Sprint(paid.ID) + `, 'PAID', 'REFUNDED', true, 'PAID', 'rogue')`,
		// ORD-O3: a second order_paid event for the paid order.
		`INSERT INTO outbox_event (topic, key, payload) VALUES ('` + order.TopicOrderPaid + `', '` + fmt.Sprint(paid.ID) + `', '{}')`,
		// ORD-O2: past the guard, the paying order failed on a pending report, unit kept.
		`ALTER TABLE flashsale_order DISABLE TRIGGER flashsale_order_guard`,
		`UPDATE flashsale_order SET state = 'FAILED' WHERE id = ` + fmt.Sprint(paying.ID),
		`INSERT INTO flashsale_order_transition (order_id, from_state, to_state, applied, found_state, cause, event_id)
		 VALUES (` + fmt.Sprint(paying.ID) + `, 'PAYING', 'FAILED', true, 'PAYING', 'rogue', ` + fmt.Sprint(pendingEvent) + `)`,
		// ORD-M1: the paid order's charge pointed at a report that says pending.
		`UPDATE flashsale_order SET charge_event_id = ` + fmt.Sprint(pendingEvent) + ` WHERE id = ` + fmt.Sprint(paid.ID),
		// ORD-O4: past part A's guard, the paid order's unit given back.
		`ALTER TABLE flashsale_reservation DISABLE TRIGGER flashsale_reservation_guard`,
		`UPDATE flashsale_reservation SET state = 'RELEASED', confirmed_at = NULL, released_at = now() WHERE id = ` + fmt.Sprint(paid.ReservationID),
		// ORD-O5: the signature record's constraint gone, an unverified callback.
		`ALTER TABLE flashsale_payment_event DROP CONSTRAINT flashsale_payment_event_signed`,
		`INSERT INTO flashsale_payment_event (order_id, source, provider_event_id, event_type, status)
		 VALUES (` + fmt.Sprint(paid.ID) + `, 'callback', 'evt_unsigned', 'effect.succeeded', 'succeeded')`,
	} {
		_, err := l.Pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	ids := []string{"ORD-O1", "ORD-O2", "ORD-O3", "ORD-O4", "ORD-O5", "ORD-M1"}
	results := e2etest.Invariants().Run(ctx, l.Pool, ids...)
	require.Len(t, results, len(ids))
	for _, r := range results {
		require.NoError(t, r.Err, r.ID)
		require.False(t, r.Holds(), "%s should report the broken rows", r.ID)
		t.Logf("%s: %v", r.ID, r.Rows)
	}
}
