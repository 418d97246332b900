package feed

import (
	"fmt"
	"math"

	"github.com/fencelab/fencelab/core/pg"
)

// Strategy is one way to build the home feed. It decides two things:
//
//   - on the write path, whether a settling post is pushed into its
//     author's followers' inboxes (pushesBelow: the author has fewer
//     active followers than this), and
//   - on the read path, where a page's candidates come from (the inbox,
//     the followed authors' timelines, or both).
//
// Every strategy's page is one statement that also re-checks AccessCheck
// (social_readable_posts) and the follow for each post it returns
// (FEED-I1), and shares the keyset cursor and the late-arrival rule
// (FEED-03), so for the same reader and cursor the three return the same
// posts in the same order once the fan-out consumer has caught up
// (FEED-I2).
type Strategy interface {
	// Name is "push", "pull" or "hybrid".
	Name() string
	// pushesBelow is the follower count from which a post is no longer
	// pushed: 0 never pushes, always (MaxInt64) pushes every post.
	pushesBelow() int64
	// sql is the page statement (store.go), with the response log or not.
	sql(logged bool) pg.Named
}

// always is pushesBelow for a strategy that pushes every post.
const always = math.MaxInt64

// push fans every post out to every active follower when it settles
// (write cost ∝ followers) and reads the reader's inbox only (read cost ∝
// the page). It can answer only readers none of whose followees has a post
// that was not pushed (errStrategyUnavailable otherwise): a post that
// settled under another strategy is not in any inbox.
type push struct{}

// pull writes no inbox rows and merges the followed authors' timelines at
// read time (read cost ∝ followees).
type pull struct{}

// hybrid pushes the posts of authors with fewer than Threshold active
// followers and pulls the rest: a page is the inbox merged with the
// timelines of the followed authors in social_feed_pull_author, each post
// taken from exactly one of them (its recorded decision).
type hybrid struct{ Threshold int64 }

func (push) Name() string   { return "push" }
func (pull) Name() string   { return "pull" }
func (hybrid) Name() string { return "hybrid" }

func (push) pushesBelow() int64     { return always }
func (pull) pushesBelow() int64     { return 0 }
func (h hybrid) pushesBelow() int64 { return h.Threshold }

func (push) sql(logged bool) pg.Named   { return sqlPagePush[b2i(logged)] }
func (pull) sql(logged bool) pg.Named   { return sqlPagePull[b2i(logged)] }
func (hybrid) sql(logged bool) pg.Named { return sqlPageHybrid[b2i(logged)] }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DefaultThreshold is the hybrid threshold: authors with this many active
// followers or more are pulled (README: "Choosing the hybrid threshold").
const DefaultThreshold = 1000

// Strategies are the strategy names, in the order reports list them.
var Strategies = []string{"push", "pull", "hybrid"}

// ParseStrategy returns the strategy called name; threshold is hybrid's.
func ParseStrategy(name string, threshold int64) (Strategy, error) {
	switch name {
	case "push":
		return push{}, nil
	case "pull":
		return pull{}, nil
	case "hybrid":
		if threshold < 1 {
			return nil, fmt.Errorf("feed: hybrid threshold must be at least 1, got %d", threshold)
		}
		return hybrid{Threshold: threshold}, nil
	}
	return nil, fmt.Errorf("%w: %q (want push, pull or hybrid)", errInvalidStrategy, name)
}

// strategyCode and codeStrategy map names to the byte a cursor carries.
func strategyCode(name string) byte {
	switch name {
	case "push":
		return 1
	case "pull":
		return 2
	case "hybrid":
		return 3
	}
	return 0
}
