package points

import (
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

// Errors is how the package's sentinels are answered over HTTP: each is
// declared below with its answer (httpx.ErrorTable); the module lists it in
// app.Module.Errors.
var Errors httpx.ErrorTable

var (
	// errInsufficientBalance: the debit would overdraw the account (PTS-I1).
	errInsufficientBalance = Errors.New(http.StatusConflict, "insufficient_balance", "points: insufficient balance")
	// ErrAccountNotFound: no account has this id.
	errAccountNotFound = Errors.New(http.StatusNotFound, "account_not_found", "points: no such account")
	// ErrNotOwner: the account belongs to someone else.
	errNotOwner = Errors.New(http.StatusForbidden, "forbidden", "points: not your account")
	// errNotUserAccount: debits and grants move points in and out of user
	// accounts; a system account is only ever the other side.
	errNotUserAccount = Errors.New(http.StatusUnprocessableEntity, "not_a_user_account", "points: not a user account")
	// errAccountExists: another account already has the requested id.
	errAccountExists = Errors.New(http.StatusConflict, "account_exists", "points: account id taken")
	// ErrDuplicateTxn: this client's key already made a ledger transaction
	// (PTS-I2's first line, points_ledger_txn_client_key), e.g. after the
	// idempotency record was purged, or under the other route's scope.
	errDuplicateTxn = Errors.New(http.StatusConflict, "duplicate_transaction", "points: idempotency key already made a ledger transaction")

	// Refused input.
	errInvalidAmount    = Errors.New(http.StatusUnprocessableEntity, "invalid_amount", "points: invalid amount")
	errInvalidReason    = Errors.New(http.StatusUnprocessableEntity, "invalid_reason", "points: invalid reason")
	errInvalidAccountID = Errors.New(http.StatusBadRequest, "invalid_id", "points: invalid account id") // the one rule for malformed ids
	errInvalidOwner     = Errors.New(http.StatusUnprocessableEntity, "invalid_owner", "points: invalid owner")
	errInvalidCursor    = Errors.New(http.StatusBadRequest, "invalid_cursor", "points: invalid cursor")
	errInvalidLimit     = Errors.New(http.StatusBadRequest, "invalid_limit", "points: invalid limit")
)

func errAmount(got int64) error {
	return fmt.Errorf("%w: amount must be an integer in %d..%d, got %d", errInvalidAmount, minAmount, MaxAmount, got)
}

func errReason() error {
	return fmt.Errorf("%w: reason must be 1..%d bytes of printable text", errInvalidReason, MaxReasonLen)
}

func errAccountID(id string) error {
	if len(id) > 80 {
		id = id[:80] + "…"
	}
	return fmt.Errorf("%w: %q (1–64 of A-Z a-z 0-9 . _ - starting with a letter or digit)", errInvalidAccountID, id)
}
