// Package orders_test runs the orders chapter's experiments (defined in
// lab/orders/lab.go) against the real app, real PostgreSQL
// and a real fake payment channel on loopback.
package orders_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	orders "github.com/fencelab/fencelab/lab/orders"
)

func TestORD01ChargeTakenAnswerDroppedStaysPayingReconcileQueryMakesItPaid(t *testing.T) {
	e2etest.Experiment(t, orders.ChargeAnswerLost)
}

func TestORD02SuccessCallbackFiveTimesShuffledWithFailureOneTransitionOneConfirmOneEvent(t *testing.T) {
	e2etest.Experiment(t, orders.SuccessDeliveredFiveTimes)
}

func TestORD03SuccessAfterHoldExpiredAndUnitResoldIsRefundedOnce(t *testing.T) {
	e2etest.Experiment(t, orders.LateSuccessUnitResold)
}

func TestORD04SuccessAfterHoldExpiredUnitFreeIsConfirmedLate(t *testing.T) {
	e2etest.Experiment(t, orders.LateSuccessUnitFree)
}

func TestORD05ForgedAndReplayedCallbacksAreRefusedAndChangeNothing(t *testing.T) {
	e2etest.Experiment(t, orders.ForgedCallbacks)
}

func TestORDLateLandingChargeAfterCloseRetakesTheUnit(t *testing.T) {
	e2etest.Experiment(t, orders.LateLandingCharge)
}

func TestORDReconcileClosesPendingChargeAfterHoldEndsAndRefusalFails(t *testing.T) {
	e2etest.Experiment(t, orders.ReconcileCloses)
}
