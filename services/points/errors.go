package points

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInsufficientBalance: the debit would overdraw the account (PTS-I1).
	errInsufficientBalance = errors.New("points: insufficient balance")
	// ErrAccountNotFound: no account has this id.
	errAccountNotFound = errors.New("points: no such account")
	// ErrNotOwner: the account belongs to someone else.
	errNotOwner = errors.New("points: not your account")
	// ErrNotUserAccount: debits and grants move points in and out of user
	// accounts; a system account is only ever the other side.
	errNotUserAccount = errors.New("points: not a user account")
	// ErrAccountExists: another account already has the requested id.
	errAccountExists = errors.New("points: account id taken")
	// ErrDuplicateTxn: this client's key already made a ledger transaction
	// (PTS-I2's first line, points_ledger_txn_client_key), e.g. after the
	// idempotency record was purged, or under the other route's scope.
	errDuplicateTxn = errors.New("points: idempotency key already made a ledger transaction")

	// Refused input.
	errInvalidAmount    = errors.New("points: invalid amount")
	errInvalidReason    = errors.New("points: invalid reason")
	errInvalidAccountID = errors.New("points: invalid account id")
	errInvalidOwner     = errors.New("points: invalid owner")
	errInvalidCursor    = errors.New("points: invalid cursor")
	errInvalidLimit     = errors.New("points: invalid limit")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(errInsufficientBalance, http.StatusConflict, "insufficient_balance"),
	httpx.Map(errAccountNotFound, http.StatusNotFound, "account_not_found"),
	httpx.Map(errNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(errNotUserAccount, http.StatusUnprocessableEntity, "not_a_user_account"),
	httpx.Map(errAccountExists, http.StatusConflict, "account_exists"),
	httpx.Map(errDuplicateTxn, http.StatusConflict, "duplicate_transaction"),
	httpx.Map(errInvalidAmount, http.StatusUnprocessableEntity, "invalid_amount"),
	httpx.Map(errInvalidReason, http.StatusUnprocessableEntity, "invalid_reason"),
	httpx.Map(errInvalidAccountID, http.StatusBadRequest, "invalid_id"), // the one rule for malformed ids
	httpx.Map(errInvalidOwner, http.StatusUnprocessableEntity, "invalid_owner"),
	httpx.Map(errInvalidCursor, http.StatusBadRequest, "invalid_cursor"),
	httpx.Map(errInvalidLimit, http.StatusBadRequest, "invalid_limit"),
}

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
