package relations

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	feedlab "github.com/fencelab/fencelab/lab/feed"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// The naive version of relations/block-revokes-on-commit: a read
// authorised from the lagging view (REL-I4 says the read path decides on
// the truth table, AccessCheck, and a derived view may only lag). The read
// is the product's home-feed page (feed.SQLPagePush), because it is the
// read path that keeps a record of what it served — its response log,
// which FEED-I1 replays against the relation rows — and the naive page
// differs from it by one thing: where the product re-checks each post with
// AccessCheck on the truth table and an active follow, the naive page asks
// the followers view whether the reader follows the author. The relation
// row is still joined, whatever its state, for the version the response
// log records, as the product's log records it.

// followersSays is the naive access: the followers view's row for (author,
// reader), active, and a post that is not SELF.
var followersSays = "FROM social_post p JOIN " + rel.FollowersView.Table +
	" v ON v.user_id = p.author AND v.peer_id = @reader::text AND v.active AND p.visibility <> 'SELF'"

var naiveViewPageStmt = feedlab.NaivePushPage(followersSays)

// naiveViewRead: user-a follows the owner (private: approved), a
// followers-only post is pushed into user-a's inbox and both views catch
// up; the owner blocks user-a. In the naive run the followers view has not
// applied the block when user-a reads the feed, so the view still says
// "follows" and the page serves the post; the response log records it
// under the follow's version that the block ended, and FEED-I1 reports
// it. In the control the view catches up before the read: the same naive
// page serves nothing.
func naiveViewRead(x *lab.X) {
	ctx := context.Background()
	const owner, reader = "user-ownerp", "user-a"
	e := StartLab(x, lab.Options{Settings: map[string]string{feed.EnvStrategy: "push", feed.EnvResponseLog: "true"}})
	e.Users(x, owner, reader)
	e.DoOp(x, rel.OpFollow, reader, owner)
	e.DoOp(x, rel.OpApprove, owner, reader)
	post := e.Post(x, owner, rel.Followers)
	x.Step(lab.Step{Actor: owner, Action: fmt.Sprintf("post %d (FOLLOWERS)", post.PostID), Outcome: lab.Accepted})

	push, err := feed.ParseStrategy("push", 0)
	require.NoError(x, err)
	svc, err := feed.NewService(labenv.Deps(e.App), feed.Config{Strategy: push, ResponseLog: true, ResponseLogRows: 100_000,
		CursorKey: feed.CursorKey([]byte("the naive read signs no cursor"))})
	require.NoError(x, err)
	fanout, err := outbox.NewRunner(e.Pool, svc.Consumer(), outbox.Options{})
	require.NoError(x, err)
	_, err = fanout.CatchUp(ctx)
	require.NoError(x, err)
	e.CatchUp(x)
	require.Equal(x, 1, e.Count(x, `SELECT count(*) FROM social_feed_inbox WHERE reader = $1 AND post_id = $2`, reader, post.PostID))
	x.Step(lab.Step{Actor: "views", Action: fmt.Sprintf("fan-out and follower views caught up: post %d in %s's inbox; the followers view says %s follows", post.PostID, reader, reader)})

	b := e.DoOp(x, rel.OpBlock, owner, reader)
	require.Equal(x, rel.StateBlocked, b.State)
	if x.Control {
		e.CatchUp(x) // the view has applied the block before the read
		x.Step(lab.Step{Actor: "views", Action: "the follower views apply the block before the read", Outcome: lab.Accepted})
	} else {
		x.Step(lab.Step{Actor: "views", Action: "the follower views have not applied the block yet (the lag REL-I4 allows)", Outcome: "lagging"})
	}
	var viewSays bool
	require.NoError(x, e.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(active), false) FROM `+rel.FollowersView.Table+
		` WHERE user_id = $1 AND peer_id = $2`, owner, reader).Scan(&viewSays))
	require.Equal(x, !x.Control, viewSays, "the view lags in the naive run only")

	served := feedlab.FirstPage(x, e.Pool, naiveViewPageStmt, reader)
	logged := e.Count(x, `SELECT count(*) FROM social_feed_served WHERE reader = $1 AND post_id = $2`, reader, post.PostID)
	outcome := lab.Refused
	if len(served) > 0 {
		outcome = lab.Violates
	}
	x.Step(lab.Step{Actor: reader, Action: "read the feed, access asked of the followers view", Outcome: outcome,
		Note: fmt.Sprintf("posts served %v; post %d logged as served %d times; the view says follows: %v", served, post.PostID, logged, viewSays)})
	x.Figure("served_after_block", len(served))
	if x.Control {
		require.Empty(x, served, "the caught-up view says the block ended the follow")
	}
	// What the truth table says meanwhile: the product's read refuses.
	require.Equal(x, http.StatusForbidden, e.Read(x, reader, post.PostID).Status, "AccessCheck on the truth table refuses the blocked reader")
}
