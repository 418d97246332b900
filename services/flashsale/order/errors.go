package order

import (
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// ErrNotFound: no such order.
	ErrNotFound = Errors.New(http.StatusNotFound, "order_not_found", "flashsale: no such order")
	// errNotOwner: the order (or the reservation to order) is someone else's.
	errNotOwner = Errors.New(http.StatusForbidden, "forbidden", "flashsale: not your order")
	// errReservationNotHeld: only a HELD reservation can be ordered.
	errReservationNotHeld = Errors.New(http.StatusConflict, "reservation_not_held", "flashsale: the reservation is not held")
	// errPaymentInProgress: the order is already paying; its outcome comes
	// by callback or reconciliation, not by paying again.
	errPaymentInProgress = Errors.New(http.StatusConflict, "payment_in_progress", "flashsale: the order is already paying")
	// errNotPayable: the order is past paying (paid, failed, closed, …).
	errNotPayable = Errors.New(http.StatusConflict, "order_not_payable", "flashsale: the order cannot be paid in its state")
	// errHoldEnded: the hold expired or was released before payment
	// started; the order is closed and the unit is (or goes) back on sale.
	errHoldEnded = Errors.New(http.StatusConflict, "hold_ended", "flashsale: the reservation's hold has ended; the order is closed")

	// Callback refusals (ORD-O5). Nothing is recorded for any of them.
	errCallbackSignature = Errors.New(http.StatusUnauthorized, "callback_signature_invalid", "flashsale: callback signature missing or invalid")
	errCallbackStale     = Errors.New(http.StatusUnauthorized, "callback_signature_stale", "flashsale: callback timestamp outside the accepted window")
	errCallbackMalformed = Errors.New(http.StatusBadRequest, "callback_malformed", "flashsale: malformed callback")
	errCallbackConflict  = Errors.New(http.StatusConflict, "callback_event_conflict", "flashsale: callback event id already received with another body")
	errCallbackOrder     = Errors.New(http.StatusNotFound, "callback_order_not_found", "flashsale: callback names no order of ours")

	// errPaymentMismatch: a report of the channel names another charge or
	// amount than the order's (a callback: 422, nothing recorded).
	errPaymentMismatch = Errors.New(http.StatusUnprocessableEntity, "payment_mismatch", "flashsale: the report does not match the order's payment")
)
