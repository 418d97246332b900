package reserve

import (
	"errors"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrSoldOut: no unit of the SKU is available (FS-R1).
	ErrSoldOut = errors.New("flashsale: sold out")
	// ErrAlreadyHolding: the user already has an active reservation of
	// the SKU (FS-R3); the error text names it.
	ErrAlreadyHolding = errors.New("flashsale: already holding an active reservation of this sku")
	// ErrRequestKeyReused: the request key already made a reservation for
	// another user or SKU (FS-R2).
	ErrRequestKeyReused = errors.New("flashsale: request_key was already used for another user or sku")
	// ErrUnknownSKU: no such SKU is on sale.
	ErrUnknownSKU = errors.New("flashsale: unknown sku")
	// ErrNotFound: no such reservation.
	ErrNotFound = errors.New("flashsale: no such reservation")
	// ErrNotOwner: the reservation belongs to someone else.
	errNotOwner = errors.New("flashsale: not your reservation")

	// Input errors, found before any database work.
	ErrInvalidSKU         = errors.New("flashsale: sku must be 1-64 characters of a-z 0-9 . _ - starting with a letter or digit")
	ErrRequestKeyMissing  = errors.New("flashsale: request_key (or an Idempotency-Key header) is required")
	ErrInvalidRequestKey  = errors.New("flashsale: request_key must be 1-255 characters of A-Z a-z 0-9 . _ : ~ + / = -")
	errRequestKeyMismatch = errors.New("flashsale: request_key and the Idempotency-Key header differ")
	ErrNoUser             = errors.New("flashsale: a hold needs a user")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrSoldOut, http.StatusConflict, "sold_out"),
	httpx.Map(ErrAlreadyHolding, http.StatusConflict, "already_holding"),
	httpx.Map(ErrRequestKeyReused, http.StatusUnprocessableEntity, "request_key_reused"),
	httpx.Map(ErrUnknownSKU, http.StatusNotFound, "unknown_sku"),
	httpx.Map(ErrNotFound, http.StatusNotFound, "reservation_not_found"),
	httpx.Map(errNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(ErrInvalidSKU, http.StatusUnprocessableEntity, "invalid_sku"),
	httpx.Map(ErrRequestKeyMissing, http.StatusUnprocessableEntity, "request_key_missing"),
	httpx.Map(ErrInvalidRequestKey, http.StatusUnprocessableEntity, "invalid_request_key"),
	httpx.Map(errRequestKeyMismatch, http.StatusUnprocessableEntity, "request_key_mismatch"),
}
