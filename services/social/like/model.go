package like

import "time"

// Topic carries one Event per change of a fact (LIKE-I2); the event key is
// the item id in decimal.
const Topic = "social.like"

// ConsumerName is the counter: the outbox consumer that keeps
// social_like_count. social_like_unapplied (the migration) names it too.
const ConsumerName = "social.likes"

// Event is the payload of a social.like event: the fact after the change.
// The counter adds +1 for liked, -1 for not.
type Event struct {
	ItemID  int64  `json:"item_id"`
	UserID  string `json:"user_id"`
	Liked   bool   `json:"liked"`
	Version int64  `json:"version"`
}

// Fact is one (item, user) row of the truth, and whether the request that
// returned it changed it (a repeated click changes nothing and writes no
// event). A user who never liked the item reads as version 0, not liked.
type Fact struct {
	ItemID    int64      `json:"item_id"`
	UserID    string     `json:"user_id"`
	Liked     bool       `json:"liked"`
	Version   int64      `json:"version"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	Changed   bool       `json:"changed"`
}

// Likes is an item's count with its error bound, as of one snapshot.
type Likes struct {
	ItemID int64 `json:"item_id"`
	// Count is the stored, asynchronously kept count.
	Count int64 `json:"count"`
	// PendingEvents are the item's like events the count does not include
	// yet; each moves it by one.
	PendingEvents int64 `json:"pending_events"`
	// ErrorBound: abs(Count - the number of liked facts) <= ErrorBound
	// (LIKE-I4). It is PendingEvents: 0 means the count is exact.
	ErrorBound int64 `json:"error_bound"`
	// LagSeconds is the age of the oldest pending event (0 when exact).
	LagSeconds float64 `json:"lag_seconds"`
	// Liked: whether the caller likes the item (read from the truth).
	Liked bool `json:"liked"`
}

// Recount is what a recompute did.
type Recount struct {
	// Items recounted, in Chunks transactions (each its own watermark).
	Items  int `json:"items"`
	Chunks int `json:"chunks"`
	// EventsAhead: events the recounts included before the consumer had
	// applied them; the consumer skips them when it gets there.
	EventsAhead int64 `json:"events_ahead"`
	// Corrected lists the items whose stored count was wrong — not merely
	// behind: before + the pending events' +1/-1 differed from the facts
	// (at most MaxCorrections are listed; Drifted counts them all).
	Drifted   int          `json:"drifted"`
	Corrected []Correction `json:"corrected"`
}

// Correction is one repaired count.
type Correction struct {
	ItemID int64 `json:"item_id"`
	Before int64 `json:"before"`
	After  int64 `json:"after"`
	// Drift = Before + pending delta - After: what the count would have
	// been off by once the consumer caught up.
	Drift int64 `json:"drift"`
}

// MaxCorrections bounds the corrections a recompute lists.
const MaxCorrections = 100
