package order

import (
	"time"
)

// Price is what one unit of the sale costs, in points-cents (chapter 7).
const Price int64 = 1990

// State is where an order is. Only the moves listed in the database's
// flashsale_order_move table exist (ORD-O1); Moves lists them here too.
type State string

const (
	StateCreated       State = "CREATED"        // ordered from a HELD reservation, not paying yet
	StatePaying        State = "PAYING"         // a charge was asked for; the channel has not settled it for us
	StatePaid          State = "PAID"           // charged and the held unit confirmed
	StateFailed        State = "FAILED"         // the channel definitely refused the charge; the unit went back
	StateClosed        State = "CLOSED"         // no charge will be taken (none exists, or it was closed); the unit went back
	statePaidLate      State = "PAID_LATE"      // charged after the hold was given up; deciding unit or refund (never committed alone)
	StateConfirmedLate State = "CONFIRMED_LATE" // charged late and a free unit retaken and confirmed
	StateRefunding     State = "REFUNDING"      // charged late with no unit left: the money is owed back
	StateRefunded      State = "REFUNDED"       // the channel reported the refund
)

// Moves is the state machine (the migration's flashsale_order_move, which
// the guard trigger enforces; ORD-O1 compares the two).
var Moves = map[State][]State{
	StateCreated:   {StatePaying, StateClosed},
	StatePaying:    {StatePaid, StateFailed, StateClosed, statePaidLate},
	StateFailed:    {statePaidLate},
	StateClosed:    {statePaidLate},
	statePaidLate:  {StateConfirmedLate, StateRefunding},
	StateRefunding: {StateRefunded},
}

// Confirmed reports whether an order in state s owns a confirmed unit.
func (s State) Confirmed() bool { return s == StatePaid || s == StateConfirmedLate }

// Order is one purchase of one reserved unit.
type Order struct {
	ID            int64  `json:"id"`
	ReservationID int64  `json:"reservation_id"`
	UserID        string `json:"user_id"`
	SKU           string `json:"sku"`
	Amount        int64  `json:"amount"`
	State         State  `json:"state"`
	// PaymentRef is the merchant reference the channel knows the order
	// by; the charge and refund keys derive from it.
	PaymentRef string `json:"payment_reference"`
	// EffectID is the channel's id of the charge, once it told us.
	EffectID string `json:"effect_id,omitempty"`
	// Charged and Refunded are what the channel reported (ORD-M1).
	Charged     int64      `json:"charged"`
	Refunded    int64      `json:"refunded"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	PayingSince *time.Time `json:"paying_since,omitempty"`

	chargeEventID *int64
}

// ChargeKey is the Idempotency-Key of the order's charge: every pay
// attempt, by any process, asks the channel for this one charge.
func (o Order) ChargeKey() string { return o.PaymentRef + ":charge" }

// RefundKey is the Idempotency-Key of the order's refund (ORD-O4: at most
// one refund, however often it is sent).
func (o Order) refundKey() string { return o.PaymentRef + ":refund" }

// Transition is one attempted move of an order, applied or refused.
type transition struct {
	ID         int64     `json:"id"`
	From       State     `json:"from"`
	To         State     `json:"to"`
	Applied    bool      `json:"applied"`
	FoundState State     `json:"found_state"`
	Unit       string    `json:"unit,omitempty"` // confirm | retake | release
	Cause      string    `json:"cause"`
	EventID    *int64    `json:"payment_event_id,omitempty"`
	At         time.Time `json:"at"`
}

// Sources of a payment event.
const (
	SourceCallback = "callback" // a signed callback from the channel
	SourceCharge   = "charge"   // the answer to our charge
	sourceQuery    = "query"    // the answer to our query by reference
	sourceClose    = "close"    // the answer to our close
	sourceRefund   = "refund"   // the answer to our refund
)

// Payment statuses as we record them: the channel's effect statuses, plus
// none (the channel authoritatively has no charge), rejected (it refused
// the request: a definite failure), unavailable (it said it did nothing,
// come back later: not a failure of the payment) and unknown (no answer).
const (
	PayPending     = "pending"
	PaySucceeded   = "succeeded"
	payFailed      = "failed"
	payClosed      = "closed"
	payRefunded    = "refunded"
	payNone        = "none"
	payRejected    = "rejected"
	payUnavailable = "unavailable"
	PayUnknown     = "unknown"
)

// PaymentEvent is one report from the channel.
type paymentEvent struct {
	ID              int64      `json:"id"`
	Source          string     `json:"source"`
	ProviderEventID string     `json:"provider_event_id,omitempty"`
	Type            string     `json:"type,omitempty"`
	EffectID        string     `json:"effect_id,omitempty"`
	Status          string     `json:"status"`
	Amount          *int64     `json:"amount,omitempty"`
	Refunded        *int64     `json:"refunded,omitempty"`
	Detail          string     `json:"detail,omitempty"`
	SignedAt        *time.Time `json:"signed_at,omitempty"`
	VerifiedAt      *time.Time `json:"verified_at,omitempty"`
	Deliveries      int        `json:"deliveries"`
	ReceivedAt      time.Time  `json:"received_at"`
}

// charged reports whether the channel says money was taken.
func (e paymentEvent) charged() bool { return e.Status == PaySucceeded || e.Status == payRefunded }

// View is an order with its history, as GET /flashsale/orders/{id} shows it.
type View struct {
	Order
	Transitions   []transition   `json:"transitions"`
	PaymentEvents []paymentEvent `json:"payment_events"`
}

// CreateRequest is the body of POST /flashsale/orders.
type CreateRequest struct {
	ReservationID int64 `json:"reservation_id"`
}

// CallbackAnswer is the body of a 200 to a callback.
type CallbackAnswer struct {
	EventID   string `json:"event_id"`
	OrderID   int64  `json:"order_id"`
	State     State  `json:"state"`
	Duplicate bool   `json:"duplicate"`
}

// ReconcileResult counts what one reconciliation run did, by outcome
// (paid, paid_late, failed, closed, refunded, pending, unanswered, …).
type ReconcileResult struct {
	Checked  int            `json:"checked"`
	Outcomes map[string]int `json:"outcomes"`
}
