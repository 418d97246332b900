package feed_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// A new follow copies only the author's newest MinBackfillPosts pushed
// posts into the follower's inbox (the bound of FENCELAB_FEED_BACKFILL_POSTS,
// here at its least), however many the author has; FEED-I2 still holds,
// and the posts published after the follow are fanned out as always.
func TestBackfillOfANewFollowIsBoundedToTheNewestPosts(t *testing.T) {
	t.Parallel()
	e := setup(t, "push", 1000, feed.EnvBackfillPosts, strconv.Itoa(feed.MinBackfillPosts))
	e.users(t, "user-a", "user-r")
	const older = 20
	var posts []rel.Post
	for range feed.MinBackfillPosts + older {
		posts = append(posts, e.post(t, "user-a", rel.Public))
	}
	e.catchUp(t)
	e.do(t, rel.OpFollow, "user-r", "user-a")
	e.catchUp(t)
	later := e.post(t, "user-a", rel.Public)
	e.catchUp(t)

	ctx := context.Background()
	rows, err := e.a.Pool.Query(ctx, `SELECT post_id FROM social_feed_inbox WHERE reader = 'user-r' ORDER BY created_at DESC, post_id DESC`)
	require.NoError(t, err)
	var got []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		got = append(got, id)
	}
	require.NoError(t, rows.Err())
	want := []int64{later.PostID}
	for i := len(posts) - 1; i >= older; i-- {
		want = append(want, posts[i].PostID)
	}
	require.Equal(t, want, got, "the later post and the newest "+strconv.Itoa(feed.MinBackfillPosts)+" before the follow")
	e2etest.Assert(t, e.a.Pool, "social")
}
