package shortlink

import "time"

// CreateRequest is the body of POST /shortlink/links.
type CreateRequest struct {
	// Target is where the link leads: an absolute http(s) URL, immutable
	// once created (to change it, revoke and create another code).
	Target string `json:"target"`
	// Alias asks for a chosen code; empty means a random one.
	Alias string `json:"alias,omitempty"`
	// ExpiresAt is fixed at creation; nil means the link never expires.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Link states, as reported to the owner.
const (
	StateLive    = "live"
	StateRevoked = "revoked"
	StateExpired = "expired"
)

// Link is a short link as its owner sees it.
type Link struct {
	Code      string     `json:"code"`
	Target    string     `json:"target"`
	Owner     string     `json:"owner"`
	Custom    bool       `json:"custom"`
	State     string     `json:"state"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// ShortURL is filled by the handler from the request's host.
	ShortURL string `json:"short_url,omitempty"`
}

// stateAt derives the state at now: revocation wins over expiry.
func (l Link) stateAt(now time.Time) string {
	switch {
	case l.RevokedAt != nil:
		return StateRevoked
	case l.ExpiresAt != nil && !now.Before(*l.ExpiresAt):
		return StateExpired
	}
	return StateLive
}

// Stats is the owner's view of a link's clicks. Clicks are the rows the
// writer stored; Dropped are clicks the process could not record (queue
// full, stats store failing) and counted instead (SL-I4).
type Stats struct {
	Code    string `json:"code"`
	Clicks  int64  `json:"clicks"`
	Dropped int64  `json:"dropped"`
}

// route is what the redirect path needs to answer for a known code; it is
// what the cache holds.
type route struct {
	target    string
	expiresAt time.Time // zero: never
	revoked   bool
	custom    bool // an alias: also found by a case variant of its code
}
