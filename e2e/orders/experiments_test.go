// Package orders_test runs the orders chapter's experiments (defined in
// services/flashsale/order/lab.go) against the real app, real PostgreSQL
// and a real fake payment channel on loopback.
package orders_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/flashsale/order"
)

func TestORD01ChargeTakenAnswerDroppedStaysPayingReconcileQueryMakesItPaid(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.ChargeAnswerLost)
}

func TestORD02SuccessCallbackFiveTimesShuffledWithFailureOneTransitionOneConfirmOneEvent(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.SuccessDeliveredFiveTimes)
}

func TestORD03SuccessAfterHoldExpiredAndUnitResoldIsRefundedOnce(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.LateSuccessUnitResold)
}

func TestORD04SuccessAfterHoldExpiredUnitFreeIsConfirmedLate(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.LateSuccessUnitFree)
}

func TestORD05ForgedAndReplayedCallbacksAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.ForgedCallbacks)
}

func TestORDLateLandingChargeAfterCloseRetakesTheUnit(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.LateLandingCharge)
}

func TestORDReconcileClosesPendingChargeAfterHoldEndsAndRefusalFails(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, order.ReconcileCloses)
}
