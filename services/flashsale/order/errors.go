package order

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrNotFound: no such order.
	ErrNotFound = errors.New("flashsale: no such order")
	// ErrNotOwner: the order (or the reservation to order) is someone else's.
	errNotOwner = errors.New("flashsale: not your order")
	// ErrReservationNotHeld: only a HELD reservation can be ordered.
	errReservationNotHeld = errors.New("flashsale: the reservation is not held")
	// ErrPaymentInProgress: the order is already paying; its outcome comes
	// by callback or reconciliation, not by paying again.
	errPaymentInProgress = errors.New("flashsale: the order is already paying")
	// ErrNotPayable: the order is past paying (paid, failed, closed, …).
	errNotPayable = errors.New("flashsale: the order cannot be paid in its state")
	// ErrHoldEnded: the hold expired or was released before payment
	// started; the order is closed and the unit is (or goes) back on sale.
	errHoldEnded = errors.New("flashsale: the reservation's hold has ended; the order is closed")

	// Callback refusals (ORD-O5). Nothing is recorded for any of them.
	errCallbackSignature = errors.New("flashsale: callback signature missing or invalid")
	errCallbackStale     = errors.New("flashsale: callback timestamp outside the accepted window")
	errCallbackMalformed = errors.New("flashsale: malformed callback")
	errCallbackConflict  = errors.New("flashsale: callback event id already received with another body")
	errCallbackOrder     = errors.New("flashsale: callback names no order of ours")

	// ErrPaymentMismatch: a report of the channel names another charge or
	// amount than the order's (a callback: 422, nothing recorded).
	errPaymentMismatch = errors.New("flashsale: the report does not match the order's payment")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrNotFound, http.StatusNotFound, "order_not_found"),
	httpx.Map(errNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(errReservationNotHeld, http.StatusConflict, "reservation_not_held"),
	httpx.Map(errPaymentInProgress, http.StatusConflict, "payment_in_progress"),
	httpx.Map(errNotPayable, http.StatusConflict, "order_not_payable"),
	httpx.Map(errHoldEnded, http.StatusConflict, "hold_ended"),
	httpx.Map(errCallbackSignature, http.StatusUnauthorized, "callback_signature_invalid"),
	httpx.Map(errCallbackStale, http.StatusUnauthorized, "callback_signature_stale"),
	httpx.Map(errCallbackMalformed, http.StatusBadRequest, "callback_malformed"),
	httpx.Map(errCallbackConflict, http.StatusConflict, "callback_event_conflict"),
	httpx.Map(errCallbackOrder, http.StatusNotFound, "callback_order_not_found"),
	httpx.Map(errPaymentMismatch, http.StatusUnprocessableEntity, "payment_mismatch"),
}
