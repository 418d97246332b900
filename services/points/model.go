package points

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// Account kinds.
const (
	kindUser   = "user"
	KindSystem = "system"
)

// The system accounts: the other side of every entry. Debits move points
// from a user account to sys:redemption, grants from sys:issuance to a user
// account, so user balances plus system balances always sum to zero.
const (
	IssuanceAccount   = "sys:issuance"
	RedemptionAccount = "sys:redemption"
	// SystemOwner owns the system accounts; no user token acts for it.
	systemOwner = "fencelab"
)

// Ledger transaction kinds.
const (
	txnDebit = "debit"
	txnGrant = "grant"
)

// Outbox topics: one event per ledger transaction, in its transaction,
// keyed by the user account.
const (
	topicDebited = "points.debited"
	topicGranted = "points.granted"
)

// Bounds on what a request may ask for.
const (
	minAmount       = 1
	MaxAmount       = 1_000_000
	MaxReasonLen    = 200 // bytes
	defaultPageSize = 50
	maxPageSize     = 200
)

// Account is an account as its owner (or an admin) sees it. A system
// account's balance is the sum of its shards; its version is always 0.
type Account struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	Kind      string    `json:"kind"`
	Balance   int64     `json:"balance"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateAccountRequest is the body of POST /points/accounts. ID is
// optional: without one the server picks "acct-" and a random suffix.
type CreateAccountRequest struct {
	ID    string `json:"id,omitempty"`
	Owner string `json:"owner"`
}

// PostingRequest is the body of a debit or a grant.
type PostingRequest struct {
	Amount int64  `json:"amount"`
	Reason string `json:"reason"`
}

// Txn is a ledger transaction as a debit or grant returns it (and as its
// outbox event carries it). Balance and Version are the user account's
// after the transaction.
type Txn struct {
	ID        int64     `json:"id"`
	Kind      string    `json:"kind"`
	AccountID string    `json:"account_id"`
	Amount    int64     `json:"amount"`
	Reason    string    `json:"reason"`
	Balance   int64     `json:"balance"`
	Version   int64     `json:"version"`
	Entries   []entry   `json:"entries"`
	CreatedAt time.Time `json:"created_at"`
}

// Entry is one signed leg of a transaction.
type entry struct {
	AccountID string `json:"account_id"`
	Amount    int64  `json:"amount"`
}

// HistoryEntry is one line of an account's history: its entry in one
// transaction, newest first.
type historyEntry struct {
	TxnID     int64     `json:"txn_id"`
	Kind      string    `json:"kind"`
	Amount    int64     `json:"amount"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

// EntryPage is one page of history. NextCursor is empty on the last page.
type EntryPage struct {
	AccountID  string         `json:"account_id"`
	Entries    []historyEntry `json:"entries"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// Drift is one account whose stored balance differs from its entries.
type Drift struct {
	AccountID   string `json:"account_id"`
	Kind        string `json:"kind"`
	Stored      int64  `json:"stored"`
	FromEntries int64  `json:"from_entries"`
	Drift       int64  `json:"drift"` // stored − from_entries
	Repaired    bool   `json:"repaired"`
	RepairID    int64  `json:"repair_id,omitempty"`
}

// RecomputeReport is the answer of POST /points/admin/recompute.
type RecomputeReport struct {
	Checked  int     `json:"checked"`
	Drifted  int     `json:"drifted"`
	Repaired int     `json:"repaired"`
	Accounts []Drift `json:"accounts"`
}

// validUserAccountID: user account ids are 1–64 of [A-Za-z0-9._-] starting
// with a letter or digit (the table's CHECK says the same). System ids have
// a colon, so the two can never collide.
func validUserAccountID(id string) bool {
	if id == "" || len(id) > 64 || !alnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func validAccountID(id string) bool {
	return validUserAccountID(id) || id == IssuanceAccount || id == RedemptionAccount
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// validate checks a posting's bounds. Amounts are integers (the JSON
// decoder already refused fractions, strings and overflows) in
// MinAmount..MaxAmount; a reason is 1..MaxReasonLen bytes of printable
// UTF-8.
func (r PostingRequest) validate() error {
	if r.Amount < minAmount || r.Amount > MaxAmount {
		return errAmount(r.Amount)
	}
	if r.Reason == "" || len(r.Reason) > MaxReasonLen || !utf8.ValidString(r.Reason) {
		return errReason()
	}
	for _, c := range r.Reason {
		if !unicode.IsPrint(c) {
			return errReason()
		}
	}
	return nil
}
