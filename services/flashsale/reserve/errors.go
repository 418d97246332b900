package reserve

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// ErrSoldOut: no unit of the SKU is available (FS-R1).
	ErrSoldOut = Errors.New(http.StatusConflict, "sold_out", "flashsale: sold out")
	// ErrAlreadyHolding: the user already has an active reservation of
	// the SKU (FS-R3); the error text names it.
	ErrAlreadyHolding = Errors.New(http.StatusConflict, "already_holding", "flashsale: already holding an active reservation of this sku")
	// errRequestKeyReused: the request key already made a reservation for
	// another user or SKU (FS-R2).
	errRequestKeyReused = Errors.New(http.StatusUnprocessableEntity, "request_key_reused", "flashsale: request_key was already used for another user or sku")
	// errUnknownSKU: no such SKU is on sale.
	errUnknownSKU = Errors.New(http.StatusNotFound, "unknown_sku", "flashsale: unknown sku")
	// errNotFound: no such reservation.
	errNotFound = Errors.New(http.StatusNotFound, "reservation_not_found", "flashsale: no such reservation")
	// errNotOwner: the reservation belongs to someone else.
	errNotOwner = Errors.New(http.StatusForbidden, "forbidden", "flashsale: not your reservation")

	// Input errors, found before any database work.
	errInvalidSKU         = Errors.New(http.StatusUnprocessableEntity, "invalid_sku", "flashsale: sku must be 1-64 characters of a-z 0-9 . _ - starting with a letter or digit")
	errRequestKeyMissing  = Errors.New(http.StatusUnprocessableEntity, "request_key_missing", "flashsale: request_key (or an Idempotency-Key header) is required")
	errInvalidRequestKey  = Errors.New(http.StatusUnprocessableEntity, "invalid_request_key", "flashsale: request_key must be 1-255 characters of A-Z a-z 0-9 . _ : ~ + / = -")
	errRequestKeyMismatch = Errors.New(http.StatusUnprocessableEntity, "request_key_mismatch", "flashsale: request_key and the Idempotency-Key header differ")
	errNoUser             = errors.New("flashsale: a hold needs a user")
)
