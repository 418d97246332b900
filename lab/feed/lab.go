package feed

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Experiments are the home feed chapter's runnable claims.
var Experiments = []lab.Experiment{RevokedOnNextRead}

// RevokedOnNextRead is FEED-02's core as a lab run, on the push strategy:
// user-0043 follows user-0042, whose post is pushed into user-0043's
// inbox and served. Then user-0042 blocks user-0043. The inbox row stays
// (inboxes are candidates, never trusted), and the next page leaves the
// post out: every page re-checks access against the truth table in the
// statement that serves it. FEED-I1 judges every served row from the
// recorded response log.
//
// The naive feed (naive.go) reads the next page with the product's page
// statement minus its access re-check: the blocked reader is served the
// post, the statement's own response log records it, and FEED-I1 reports
// the row served without an active follow. Its control is the same naive
// read with no block: every row it serves was allowed.
var RevokedOnNextRead = lab.Experiment{
	ID:         "feed/revoked-on-next-read",
	Test:       "TestFEEDLabRevokedOnNextRead",
	Claim:      "a block takes effect on the blocked reader's next page, whatever the inbox still holds",
	Invariants: []string{"FEED-I1", "FEED-I2"},
	Naive:      "serve the next page with the product's page statement minus its access re-check (no AccessCheck, no active-follow condition)",
	Catches:    []string{"FEED-I1"},
	Control:    "the same naive read, without the block",
	Run:        runRevokedOnNextRead,
}

func runRevokedOnNextRead(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{Settings: map[string]string{feed.EnvStrategy: "push", feed.EnvResponseLog: "true"}})
	const author, reader = "user-0042", "user-0043"
	people := labkit.People(x, a, author, reader)
	f, err := people.Do(ctx, rel.OpFollow, reader, author)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: reader, Action: "follow " + author, Outcome: lab.Accepted, Note: fmt.Sprintf("relation %s → %s version %d", reader, author, f.Version)})
	post, err := people.CreatePost(ctx, author, rel.PostRequest{Body: "for my followers", Visibility: rel.Public})
	require.NoError(x, err)
	x.Step(lab.Step{Actor: author, Action: fmt.Sprintf("post %d", post.PostID), Outcome: lab.Accepted})

	push, err := feed.ParseStrategy("push", 0)
	require.NoError(x, err)
	svc, err := feed.NewService(labenv.Deps(a), feed.Config{Strategy: push, ResponseLog: true, ResponseLogRows: 100_000, CursorKey: feed.CursorKey([]byte("the fan-out signs no cursor"))})
	require.NoError(x, err)
	fanout, err := outbox.NewRunner(a.Pool, svc.Consumer(), outbox.Options{})
	require.NoError(x, err)
	_, err = fanout.CatchUp(ctx)
	require.NoError(x, err)
	inbox := func() int {
		return a.Count(x, `SELECT count(*) FROM social_feed_inbox WHERE reader = $1 AND post_id = $2`, reader, post.PostID)
	}
	require.Equal(x, 1, inbox())
	x.Step(lab.Step{Actor: "fan-out", Action: fmt.Sprintf("push post %d into %s's inbox", post.PostID, reader), Outcome: lab.Accepted})

	tok := a.Token(x, reader, httpx.RoleUser)
	page := func() feed.Page {
		r := a.Do(x, lab.Req{Method: http.MethodGet, Path: "/social/feed", Token: tok})
		require.Equal(x, http.StatusOK, r.Status, string(r.Body))
		var p feed.Page
		r.JSON(x, &p)
		return p
	}
	require.Len(x, page().Posts, 1)
	x.Step(lab.Step{Actor: reader, Action: "read the feed", Outcome: lab.Accepted, Note: fmt.Sprintf("post %d served", post.PostID)})

	if !x.Control { // the control reads naively without the block
		b, err := people.Do(ctx, rel.OpBlock, author, reader)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: author, Action: "block " + reader, Outcome: lab.Accepted,
			Note: fmt.Sprintf("relation %s → %s version %d; the follow %s → %s ends in the same transaction; the inbox row stays",
				author, reader, b.Version, reader, author)})
		require.Equal(x, 1, inbox(), "inboxes are candidates: the block leaves the row")
	}

	if x.Naive {
		naiveRead(x, a, reader, post.PostID)
		return
	}
	p := page()
	x.Step(lab.Step{Actor: reader, Action: "read the feed", Outcome: lab.Refused, Note: fmt.Sprintf("%d posts: the re-check leaves post %d out", len(p.Posts), post.PostID)})
	require.Empty(x, p.Posts, "the next page after the block")
	x.Figure("inbox_rows", inbox())
	x.Figure("served_after_block", len(p.Posts))
}
