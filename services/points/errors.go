package points

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
)

var (
	// ErrInsufficientBalance: the debit would overdraw the account (PTS-I1).
	ErrInsufficientBalance = errors.New("points: insufficient balance")
	// ErrAccountNotFound: no account has this id.
	ErrAccountNotFound = errors.New("points: no such account")
	// ErrNotOwner: the account belongs to someone else.
	ErrNotOwner = errors.New("points: not your account")
	// ErrNotUserAccount: debits and grants move points in and out of user
	// accounts; a system account is only ever the other side.
	ErrNotUserAccount = errors.New("points: not a user account")
	// ErrAccountExists: another account already has the requested id.
	ErrAccountExists = errors.New("points: account id taken")
	// ErrDuplicateTxn: this client's key already made a ledger transaction
	// (PTS-I2's first line, points_ledger_txn_client_key), e.g. after the
	// idempotency record was purged, or under the other route's scope.
	ErrDuplicateTxn = errors.New("points: idempotency key already made a ledger transaction")

	// Refused input.
	ErrInvalidAmount    = errors.New("points: invalid amount")
	ErrInvalidReason    = errors.New("points: invalid reason")
	ErrInvalidAccountID = errors.New("points: invalid account id")
	ErrInvalidOwner     = errors.New("points: invalid owner")
	ErrInvalidCursor    = errors.New("points: invalid cursor")
	ErrInvalidLimit     = errors.New("points: invalid limit")
)

// Errors is how the package's sentinels are answered over HTTP (the
// module lists it in app.Module.Errors; httpx.NewErrors builds the table).
var Errors = []httpx.ErrorMapping{
	httpx.Map(ErrInsufficientBalance, http.StatusConflict, "insufficient_balance"),
	httpx.Map(ErrAccountNotFound, http.StatusNotFound, "account_not_found"),
	httpx.Map(ErrNotOwner, http.StatusForbidden, "forbidden"),
	httpx.Map(ErrNotUserAccount, http.StatusUnprocessableEntity, "not_a_user_account"),
	httpx.Map(ErrAccountExists, http.StatusConflict, "account_exists"),
	httpx.Map(ErrDuplicateTxn, http.StatusConflict, "duplicate_transaction"),
	httpx.Map(ErrInvalidAmount, http.StatusUnprocessableEntity, "invalid_amount"),
	httpx.Map(ErrInvalidReason, http.StatusUnprocessableEntity, "invalid_reason"),
	httpx.Map(ErrInvalidAccountID, http.StatusBadRequest, "invalid_id"), // the one rule for malformed ids
	httpx.Map(ErrInvalidOwner, http.StatusUnprocessableEntity, "invalid_owner"),
	httpx.Map(ErrInvalidCursor, http.StatusBadRequest, "invalid_cursor"),
	httpx.Map(ErrInvalidLimit, http.StatusBadRequest, "invalid_limit"),
}

func errAmount(got int64) error {
	return fmt.Errorf("%w: amount must be an integer in %d..%d, got %d", ErrInvalidAmount, MinAmount, MaxAmount, got)
}

func errReason() error {
	return fmt.Errorf("%w: reason must be 1..%d bytes of printable text", ErrInvalidReason, MaxReasonLen)
}

func errAccountID(id string) error {
	if len(id) > 80 {
		id = id[:80] + "…"
	}
	return fmt.Errorf("%w: %q (1–64 of A-Z a-z 0-9 . _ - starting with a letter or digit)", ErrInvalidAccountID, id)
}
