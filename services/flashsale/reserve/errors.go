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
	// errRequestKeyReused: the request key already made a reservation for
	// another user or SKU (FS-R2).
	errRequestKeyReused = errors.New("flashsale: request_key was already used for another user or sku")
	// errUnknownSKU: no such SKU is on sale.
	errUnknownSKU = errors.New("flashsale: unknown sku")
	// errNotFound: no such reservation.
	errNotFound = errors.New("flashsale: no such reservation")
	// errNotOwner: the reservation belongs to someone else.
	errNotOwner = errors.New("flashsale: not your reservation")

	// Input errors, found before any database work.
	errInvalidSKU         = errors.New("flashsale: sku must be 1-64 characters of a-z 0-9 . _ - starting with a letter or digit")
	errRequestKeyMissing  = errors.New("flashsale: request_key (or an Idempotency-Key header) is required")
	errInvalidRequestKey  = errors.New("flashsale: request_key must be 1-255 characters of A-Z a-z 0-9 . _ : ~ + / = -")
	errRequestKeyMismatch = errors.New("flashsale: request_key and the Idempotency-Key header differ")
	errNoUser             = errors.New("flashsale: a hold needs a user")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrSoldOut, http.StatusConflict, "sold_out"),
	httpx.Map(ErrAlreadyHolding, http.StatusConflict, "already_holding"),
	httpx.Map(errRequestKeyReused, http.StatusUnprocessableEntity, "request_key_reused"),
	httpx.Map(errUnknownSKU, http.StatusNotFound, "unknown_sku"),
	httpx.Map(errNotFound, http.StatusNotFound, "reservation_not_found"),
	httpx.Map(errNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(errInvalidSKU, http.StatusUnprocessableEntity, "invalid_sku"),
	httpx.Map(errRequestKeyMissing, http.StatusUnprocessableEntity, "request_key_missing"),
	httpx.Map(errInvalidRequestKey, http.StatusUnprocessableEntity, "invalid_request_key"),
	httpx.Map(errRequestKeyMismatch, http.StatusUnprocessableEntity, "request_key_mismatch"),
}
