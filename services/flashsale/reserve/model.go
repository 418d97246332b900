package reserve

import (
	"regexp"
	"time"
)

// state is where a reservation is in its life. Only these moves exist
// (the database's guard trigger refuses any other): HELD → CONFIRMED
// (paid), HELD → RELEASED (expired or cancelled), RELEASED → CONFIRMED (a
// late payment that found a free unit: Inventory.Retake).
type state string

const (
	StateHeld      state = "HELD"
	StateConfirmed state = "CONFIRMED"
	StateReleased  state = "RELEASED"
)

// active reports whether a reservation in state s owns a unit (FS-R1).
func (s state) active() bool { return s == StateHeld || s == StateConfirmed }

// Reservation is one user's claim on one unit of one SKU.
type Reservation struct {
	ID         int64  `json:"id"`
	SKU        string `json:"sku"`
	UserID     string `json:"user_id"`
	RequestKey string `json:"request_key"`
	State      state  `json:"state"`
	// ExpiresAt is when an unpaid hold may be released. A HELD
	// reservation past it still owns its unit until the release job runs.
	ExpiresAt   time.Time  `json:"expires_at"`
	CreatedAt   time.Time  `json:"created_at"`
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
	ReleasedAt  *time.Time `json:"released_at,omitempty"`
	// RetakenAt is set when a released reservation took a unit again
	// (Retake); ReleasedAt then stays set as history.
	RetakenAt *time.Time `json:"retaken_at,omitempty"`
}

// Stock is a SKU's units at one instant (one snapshot, so
// Available + Held + Confirmed = Stock: FS-R1).
type Stock struct {
	SKU       string `json:"sku"`
	Stock     int    `json:"stock"`
	Available int    `json:"available"`
	Held      int    `json:"held"`
	Confirmed int    `json:"confirmed"`
}

// ReserveRequest is the body of POST /flashsale/reservations.
type ReserveRequest struct {
	SKU string `json:"sku"`
	// RequestKey names the attempt: resending it (after a timeout, a
	// dropped connection, a 503) can never make a second reservation
	// (FS-R2). The Idempotency-Key header is accepted in its place.
	RequestKey string `json:"request_key"`
}

// HoldRequest is what Inventory.Hold needs: who holds which SKU under
// which key. The caller has validated it (Validate).
type HoldRequest struct {
	UserID     string
	SKU        string
	RequestKey string
}

// Input bounds. Request keys use the Idempotency-Key alphabet and length so
// that either may carry the other.
const maxRequestKeyLen = 255

var (
	skuRE        = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	requestKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:~+/=-]{1,255}$`)
)

// validSKU reports whether s is a well-formed SKU (the table's CHECK says
// the same).
func validSKU(s string) bool { return skuRE.MatchString(s) }

// Validate checks a hold request's fields before any database work.
func (h HoldRequest) Validate() error {
	switch {
	case !validSKU(h.SKU):
		return errInvalidSKU
	case h.RequestKey == "":
		return errRequestKeyMissing
	case len(h.RequestKey) > maxRequestKeyLen || !requestKeyRE.MatchString(h.RequestKey):
		return errInvalidRequestKey
	case h.UserID == "":
		return errNoUser
	}
	return nil
}
