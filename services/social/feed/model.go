package feed

import (
	"time"

	"github.com/fencelab/fencelab/services/social/rel"
)

// Limits of the API.
const (
	defaultLimit = 20
	MaxLimit     = 100
)

// ConsumerName is the fan-out consumer: it settles posts and writes the
// inboxes from the social.post and social.rel streams (social_view row
// "feed_inbox", whose lag REL-I4 bounds).
const ConsumerName = "social.feed.fanout"

// batchSize bounds the events one fan-out transaction applies. With the
// hybrid strategy a settled post writes fewer than Threshold inbox rows,
// so one fan-out transaction writes fewer than batchSize × Threshold; with
// push a celebrity's post writes one row per follower in one transaction.
const batchSize = 32

// Query is a feed request: all fields optional.
type Query struct {
	// Strategy is push, pull or hybrid; "" is the cursor's, or the
	// configured default on a first page.
	Strategy string
	// Cursor is the previous page's Next; "" is the first page.
	Cursor string
	// Limit is the page size, 1..MaxLimit; 0 is defaultLimit.
	Limit int
}

// Page is one page of a reader's home feed: posts of authors the reader
// follows now and may read now, newest first.
type Page struct {
	Strategy string     `json:"strategy"`
	Posts    []rel.Post `json:"posts"`
	// Late is how many of the first posts are late arrivals: posts that
	// settled after the previous page was read, inside the range already
	// scrolled (their transactions committed late). They come first, each
	// newer than the rest of the page; a page holds at most Limit of them
	// and at most Limit others.
	Late int `json:"late"`
	// Next is the opaque cursor of the next page; absent at the end.
	Next string `json:"next,omitempty"`
}

// settledPost is one post the fan-out consumer settled.
type settledPost struct {
	PostID    int64
	Pushed    bool
	CreatedAt time.Time
	InboxRows int64 // inbox rows written for it
}
