package feed_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	feedlab "github.com/fencelab/fencelab/lab/feed"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// TestFEED02RevocationsTakeEffectOnTheNextReadWhateverTheInboxHolds: the
// reader follows four authors; their posts are fanned out into the
// reader's inbox. Then the reader unfollows one author, another blocks the
// reader, and a third turns a post SELF — with the fan-out consumer
// stopped, so nothing derived has moved. The very next read, with every
// strategy, and the next page of a scroll begun before the changes,
// exclude exactly those posts; their inbox rows are still there. The
// response log then passes FEED-I1, and every social invariant holds once
// the consumer has caught up (the inbox rows stay: only the read path
// decides).
func TestFEED02RevocationsTakeEffectOnTheNextReadWhateverTheInboxHolds(t *testing.T) {
	t.Parallel()
	e := setup(t, "push", feed.DefaultThreshold)
	const reader = "user-r"
	e.users(t, reader, "user-a", "user-b", "user-cp", "user-d")
	for _, a := range []string{"user-a", "user-b", "user-cp", "user-d"} {
		e.do(t, rel.OpFollow, reader, a)
	}
	e.do(t, rel.OpApprove, "user-cp", reader)
	a1 := e.post(t, "user-a", rel.Public)
	b1 := e.post(t, "user-b", rel.Followers)
	c1 := e.post(t, "user-cp", rel.Followers)
	d1 := e.post(t, "user-d", rel.Public)
	d2 := e.post(t, "user-d", rel.Public)
	e.catchUp(t)
	all := []int64{d2.PostID, d1.PostID, c1.PostID, b1.PostID, a1.PostID} // newest first
	for _, id := range all {
		require.True(t, e.inboxHas(t, reader, id), "post %d not fanned out", id)
	}
	for _, st := range feed.Strategies {
		pages, code := e.scroll(t, reader, st, 0)
		require.Empty(t, code)
		require.Equal(t, all, ids(pages), st)
	}
	// A scroll begun before the changes: its first page holds d2 and d1.
	before := map[string]feed.Page{}
	for _, st := range feed.Strategies {
		before[st] = e.page(t, reader, st, "", 2)
		require.Len(t, before[st].Posts, 2)
		require.NotEmpty(t, before[st].Next)
	}

	// The revocations, through the API; the consumer does not run.
	call := func(sub, method, path string, body any) {
		r := e.a.Do(t, e2etest.Req{Method: method, Path: path, Token: e.token(t, sub), Body: body})
		require.Equal(t, http.StatusOK, r.Status, "%s %s: %s", method, path, r.Body)
	}
	call(reader, "POST", "/social/users/user-a/unfollow", nil)
	call("user-b", "POST", "/social/users/"+reader+"/block", nil)
	call("user-d", "PATCH", fmt.Sprintf("/social/posts/%d", d1.PostID), map[string]string{"visibility": "SELF"})

	visible := []int64{d2.PostID, c1.PostID}
	for _, st := range feed.Strategies {
		pages, code := e.scroll(t, reader, st, 0)
		require.Empty(t, code)
		require.Equal(t, visible, ids(pages), "%s: the next read must exclude the revoked posts", st)
		next := e.page(t, reader, st, before[st].Next, 2)
		require.Equal(t, []int64{c1.PostID}, ids([]feed.Page{next}), "%s: the scroll's next page", st)
		require.Empty(t, next.Next)
	}
	for _, id := range all {
		require.True(t, e.inboxHas(t, reader, id), "inbox row of post %d vanished: the read path did the work", id)
	}
	var pending int64
	require.NoError(t, e.a.Pool.QueryRow(context.Background(), `
SELECT count(*) FROM outbox_event e, outbox_consumer c
 WHERE c.name = $1 AND e.topic = ANY (c.topics) AND (e.tx_id, e.id) > (c.position_tx, c.position_id)`,
		feed.ConsumerName).Scan(&pending))
	require.Positive(t, pending, "the revocations' events must still be pending for the consumer")
	e2etest.Assert(t, e.a.Pool, "FEED-I1")

	// Once the consumer has applied them, the inbox still holds every row
	// and the reads are unchanged.
	e.catchUp(t)
	for _, id := range all {
		require.True(t, e.inboxHas(t, reader, id))
	}
	for _, st := range feed.Strategies {
		pages, _ := e.scroll(t, reader, st, 0)
		require.Equal(t, visible, ids(pages), st)
	}
	// The author still reads their SELF post, outside the feed.
	r := e.a.Do(t, e2etest.Req{Method: "GET", Path: fmt.Sprintf("/social/posts/%d", d1.PostID), Token: e.token(t, "user-d")})
	require.Equal(t, http.StatusOK, r.Status)
	e2etest.Assert(t, e.a.Pool, "social")
}

// TestFEEDInvariantsCatchEachCorruption: each FEED invariant reports the
// row that breaks it — a served post the reader could not read at the
// served versions (FEED-I1), a missing or stray inbox row, an unsettled
// post, a settled post that moved, an unpushed post outside the pull set
// (FEED-I2) — and holds again once the row is put back.
func TestFEEDInvariantsCatchEachCorruption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, "hybrid", 2)
	e.users(t, "user-r", "user-s", "user-a", "user-c")
	for _, f := range [][2]string{{"user-r", "user-a"}, {"user-s", "user-a"}, {"user-r", "user-c"}} {
		e.do(t, rel.OpFollow, f[0], f[1])
	}
	pub := e.post(t, "user-a", rel.Public)   // user-a has 2 followers: pulled
	small := e.post(t, "user-c", rel.Public) // user-c has 1: pushed
	e.catchUp(t)
	pages, _ := e.scroll(t, "user-r", "hybrid", 0)
	require.Equal(t, []int64{small.PostID, pub.PostID}, ids(pages))
	e2etest.Assert(t, e.a.Pool, "social")

	var followV int64
	require.NoError(t, e.a.Pool.QueryRow(ctx, `SELECT version FROM social_relation WHERE follower = 'user-r' AND followee = 'user-a'`).Scan(&followV))
	e.do(t, rel.OpUnfollow, "user-r", "user-a")
	_, err := e.rel.SetVisibility(ctx, "user-c", small.PostID, rel.Self)
	require.NoError(t, err)
	e.catchUp(t)
	e2etest.Assert(t, e.a.Pool, "social") // the log holds reads from before the changes: fine

	for _, c := range []struct {
		id, problem string
		corrupt     string
		restore     string
	}{
		{"FEED-I1", "served without an active follow",
			fmt.Sprintf(`INSERT INTO social_feed_served (reader, post_id, author, strategy, follow_version, post_version)
			             VALUES ('user-r', %d, 'user-a', 'pull', %d, 1)`, pub.PostID, followV+1),
			`DELETE FROM social_feed_served WHERE follow_version > 1`},
		{"FEED-I1", "served a SELF post",
			fmt.Sprintf(`INSERT INTO social_feed_served (reader, post_id, author, strategy, follow_version, post_version)
			             VALUES ('user-r', %d, 'user-c', 'push', 1, 2)`, small.PostID),
			`DELETE FROM social_feed_served WHERE post_version = 2`},
		{"FEED-I1", "served versions the truth never had",
			fmt.Sprintf(`INSERT INTO social_feed_served (reader, post_id, author, strategy, follow_version, post_version)
			             VALUES ('user-r', %d, 'user-c', 'push', 1, 9)`, small.PostID),
			`DELETE FROM social_feed_served WHERE post_version = 9`},
		{"FEED-I2", "pushed post missing from an active follower's inbox",
			fmt.Sprintf(`DELETE FROM social_feed_inbox WHERE reader = 'user-r' AND post_id = %d`, small.PostID),
			fmt.Sprintf(`INSERT INTO social_feed_inbox SELECT 'user-r', created_at, post_id FROM social_feed_post WHERE post_id = %d`, small.PostID)},
		{"FEED-I2", "inbox row without its pushed settled post",
			fmt.Sprintf(`INSERT INTO social_feed_inbox SELECT 'user-s', created_at, post_id FROM social_feed_post WHERE post_id = %d`, pub.PostID),
			fmt.Sprintf(`DELETE FROM social_feed_inbox WHERE reader = 'user-s' AND post_id = %d`, pub.PostID)},
		{"FEED-I2", "creation event applied, post not settled",
			fmt.Sprintf(`DELETE FROM social_feed_post WHERE post_id = %d`, pub.PostID),
			fmt.Sprintf(`INSERT INTO social_feed_post (post_id, author, created_at, pushed) SELECT post_id, author, created_at, false FROM social_post WHERE post_id = %d`, pub.PostID)},
		{"FEED-I2", "settled post disagrees with social_post",
			fmt.Sprintf(`UPDATE social_feed_post SET created_at = created_at - interval '1 second' WHERE post_id = %d`, pub.PostID),
			fmt.Sprintf(`UPDATE social_feed_post SET created_at = created_at + interval '1 second' WHERE post_id = %d`, pub.PostID)},
		{"FEED-I2", "post not pushed, author not in the pull set",
			`DELETE FROM social_feed_pull_author WHERE author = 'user-a'`,
			`INSERT INTO social_feed_pull_author (author) VALUES ('user-a')`},
	} {
		_, err := e.a.Pool.Exec(ctx, c.corrupt)
		require.NoError(t, err, c.corrupt)
		res := e2etest.Invariants().Run(ctx, e.a.Pool, c.id)[0]
		require.NoError(t, res.Err)
		require.NotEmpty(t, res.Rows, "%s did not see: %s", c.id, c.problem)
		var problems []string
		for _, row := range res.Rows {
			problems = append(problems, fmt.Sprint(row[0]))
		}
		require.True(t, slices.Contains(problems, c.problem), "%s reported %v, want %q", c.id, problems, c.problem)
		_, err = e.a.Pool.Exec(ctx, c.restore)
		require.NoError(t, err, c.restore)
		e2etest.Assert(t, e.a.Pool, c.id)
	}
	e2etest.Assert(t, e.a.Pool, "social")
}

// The feed chapter's experiment: lab/feed/lab.go.
func TestExperiments(t *testing.T) { e2etest.Experiments(t, feedlab.Experiments) }
