package rel

import (
	"encoding/base64"
	"encoding/binary"
	"time"
)

// State is the state of one ordered pair (follower, followee) in the truth
// table.
type State string

const (
	StateNone    State = "none"    // no relation (a tombstone once it had one)
	StatePending State = "pending" // follower asked to follow a private account
	StateActive  State = "active"  // follower follows followee: reads its FOLLOWERS posts
	StateBlocked State = "blocked" // follower blocks followee
)

// Visibility says who may read a post.
type Visibility string

const (
	Public    Visibility = "PUBLIC"    // anyone not in a blocked pair with the author
	Followers Visibility = "FOLLOWERS" // the author's active followers
	Self      Visibility = "SELF"      // the author only
)

// valid reports a known visibility.
func (v Visibility) valid() bool { return v == Public || v == Followers || v == Self }

// Op names a relation operation, run by Service.Do(ctx, op, actor, other);
// it is the event's cause and a metric label.
type Op string

const (
	// OpFollow: actor follows other — active at once for a public
	// account, pending for a private one. Refused when either blocks the
	// other (REL-I2).
	OpFollow Op = "follow"
	// OpUnfollow ends a follow or withdraws a pending request.
	OpUnfollow Op = "unfollow"
	// OpApprove: actor, the owner, accepts other's pending request.
	OpApprove Op = "approve"
	// OpReject: actor, the owner, declines other's pending request.
	OpReject Op = "reject"
	// OpBlock: actor blocks other; follows both ways end (REL-I2).
	OpBlock Op = "block"
	// OpUnblock lifts a block; no follow comes back with it.
	OpUnblock Op = "unblock"
)

// Ops are the six relation operations.
var Ops = []Op{OpFollow, OpUnfollow, OpApprove, OpReject, OpBlock, OpUnblock}

// Relation is one row of the truth table.
type Relation struct {
	Follower string `json:"follower"`
	Followee string `json:"followee"`
	State    State  `json:"state"`
	Version  int64  `json:"version"`
	// UpdatedAt is absent while the pair has no row (state none, version
	// 0): there is no change to date, and a zero time would read as one.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Result is what an operation did: the acting pair's row after it, and
// whether anything changed (an operation that finds its target state
// already in place changes nothing and writes no event).
type Result struct {
	Relation
	Changed bool `json:"changed"`
}

// User is a profile.
type User struct {
	UserID    string    `json:"user_id"`
	Private   bool      `json:"private"`
	CreatedAt time.Time `json:"created_at"`
}

// Post is one post.
type Post struct {
	PostID     int64      `json:"post_id"`
	Author     string     `json:"author"`
	Visibility Visibility `json:"visibility"`
	Body       string     `json:"body"`
	Version    int64      `json:"version"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// Event topics.
const (
	// Topic carries one RelEvent per change of a truth-table row (REL-I1).
	Topic = "social.rel"
	// PostTopic carries one PostEvent per post creation or visibility change.
	PostTopic = "social.post"
)

// RelEvent is the payload of a social.rel event: the row's state after
// the change and its version. Consumers apply it only if the version is
// newer than what they hold (REL-I3). The event key is the followee.
type RelEvent struct {
	Follower string `json:"follower"`
	Followee string `json:"followee"`
	State    State  `json:"state"`
	Version  int64  `json:"version"`
	Op       Op     `json:"op"`
}

// PostEvent is the payload of a social.post event (key: the author).
type PostEvent struct {
	PostID     int64      `json:"post_id"`
	Author     string     `json:"author"`
	Visibility Visibility `json:"visibility"`
	Version    int64      `json:"version"`
	CreatedAt  time.Time  `json:"created_at"`
}

// Requests and responses of the HTTP API.
type (
	// ProfileRequest is PUT /social/me.
	ProfileRequest struct {
		Private *bool `json:"private"`
	}
	// PostRequest is POST /social/posts.
	PostRequest struct {
		Body       string     `json:"body"`
		Visibility Visibility `json:"visibility"`
	}
	// VisibilityRequest is PATCH /social/posts/{id}.
	VisibilityRequest struct {
		Visibility Visibility `json:"visibility"`
	}
	// Page is a list of user ids with the cursor of the next page.
	Page struct {
		Users []string `json:"users"`
		Next  string   `json:"next,omitempty"`
		// Lag is what the view behind the list has not applied yet.
		Lag *Lag `json:"lag,omitempty"`
	}
	// PostPage is a page of posts, newest first.
	PostPage struct {
		Posts []Post `json:"posts"`
		Next  string `json:"next,omitempty"`
	}
	// Counts are a user's follower and following counts from the views,
	// with the events concerning the user that each view has not applied.
	Counts struct {
		UserID    string `json:"user_id"`
		Followers int64  `json:"followers"`
		Following int64  `json:"following"`
		// Pending: this user's relation events not yet applied, per view;
		// each count is off by at most that many (REL-I4).
		Pending map[string]int64 `json:"pending_events"`
	}
	// Lag of a derived view.
	Lag struct {
		View          string  `json:"view"`
		Consumer      string  `json:"consumer"`
		Events        int64   `json:"events"`          // unapplied events on social.rel
		Seconds       float64 `json:"seconds"`         // age of the oldest of them (0 when caught up)
		MaxLagSeconds float64 `json:"max_lag_seconds"` // the declared bound (social_view.max_lag)
		Within        bool    `json:"within"`          // Seconds <= MaxLagSeconds
	}
)

// postCursor is a keyset position in a newest-first post order: the next page
// holds posts strictly before (CreatedAt, PostID). Feeds use it too.
type postCursor struct {
	CreatedAt time.Time
	PostID    int64
}

// encode returns the opaque form of the cursor (URL-safe).
func (c postCursor) encode() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(c.CreatedAt.UnixMicro()))
	binary.BigEndian.PutUint64(b[8:], uint64(c.PostID))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// DecodeCursor parses an opaque cursor; "" is the first page (ok = false).
func DecodeCursor(s string) (c postCursor, ok bool, err error) {
	if s == "" {
		return postCursor{}, false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return postCursor{}, false, errInvalidCursor
	}
	id := int64(binary.BigEndian.Uint64(b[8:]))
	if id <= 0 {
		return postCursor{}, false, errInvalidCursor
	}
	return postCursor{CreatedAt: time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8]))).UTC(), PostID: id}, true, nil
}
