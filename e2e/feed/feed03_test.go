package feed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// TestFEED03PaginateWhileAThousandPostsArePublished: a reader scrolls
// their feed ten posts a page while 1,000 posts by the authors they follow
// are published concurrently over HTTP and the fan-out consumer settles
// them, for each strategy. Three posts are held in open transactions from
// before the first page — created_at is the transaction's start, so their
// place is among the posts already scrolled past when they finally commit
// (the timeline a plain keyset cursor skips). The scroll paces itself on
// the publishers, commits the held posts once it has passed their place,
// and reads its last pages after everything has settled.
//
// No post appears twice; every post at or below the first page's newest
// that the reader may read is served — the held ones as late arrivals on
// a page after their commit — and nothing newer than it is (a fresh first
// page shows those).
func TestFEED03PaginateWhileAThousandPostsArePublished(t *testing.T) {
	t.Parallel()
	for _, st := range feed.Strategies {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			paginateWhilePublishing(t, st)
		})
	}
}

func paginateWhilePublishing(t *testing.T, strategy string) {
	ctx := context.Background()
	e := setup(t, strategy, 3)
	const reader, limit, existing, published = "user-r", 10, 400, 1000
	var authors []string
	for i := range 12 {
		authors = append(authors, fmt.Sprintf("user-a%02d", i))
	}
	e.users(t, append([]string{reader, "user-x0", "user-x1", "user-x2"}, authors...)...)
	for _, a := range authors {
		e.do(t, rel.OpFollow, reader, a)
	}
	for _, x := range []string{"user-x0", "user-x1", "user-x2"} { // with 4 followers, hybrid pulls a00 and a01
		e.do(t, rel.OpFollow, x, authors[0])
		e.do(t, rel.OpFollow, x, authors[1])
	}
	rng := rand.New(rand.NewPCG(3, uint64(len(strategy))))
	visibility := func(rng *rand.Rand) rel.Visibility {
		if rng.IntN(10) == 0 {
			return rel.Self
		}
		return rel.Public
	}
	for i := range existing {
		_, err := e.rel.CreatePost(ctx, authors[i%len(authors)], rel.PostRequest{Body: "existing", Visibility: visibility(rng)})
		require.NoError(t, err)
	}
	e.catchUp(t)

	// Three publishes whose transactions begin now and write only after
	// the scroll has passed their place: created_at is the transaction's
	// start, so they commit long after posts stamped later. (They hold no
	// xid until they write, so they do not hold back the outbox horizon of
	// this or any other test meanwhile.) Then a committed marker, so their
	// place lies below the first page's newest post.
	type heldPost struct {
		tx     pgx.Tx
		author string
		at     time.Time // the transaction's now(): its post's created_at
		id     int64
	}
	var held []*heldPost
	var heldAt time.Time
	for _, a := range []string{authors[0], authors[2], authors[5]} {
		tx, err := e.a.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
		var at time.Time
		require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&at))
		if heldAt.IsZero() || at.Before(heldAt) {
			heldAt = at
		}
		held = append(held, &heldPost{tx: tx, author: a, at: at})
	}
	marker := e.post(t, authors[3], rel.Public)
	e.catchUp(t)

	// The fan-out consumer runs from here on, as in production.
	runCtx, stopConsumer := context.WithCancel(ctx)
	var consumer sync.WaitGroup
	consumer.Go(func() { _ = e.fanout.Run(runCtx) })
	defer func() { stopConsumer(); consumer.Wait() }()

	// The last fifth of the publishes waits for the held commits, so that
	// posts are still arriving after them.
	const beforeRelease = published * 4 / 5
	var done, publishErrs atomic.Int64
	var publishers sync.WaitGroup
	release := make(chan struct{})
	for w := range 4 {
		publishers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for i := range published / 4 {
				if i == beforeRelease/4 {
					<-release
				}
				a := authors[rng.IntN(len(authors))]
				r, err := e.a.Send(ctx, e2etest.Req{Method: "POST", Path: "/social/posts", Token: e.token(t, a),
					Body: rel.PostRequest{Body: "published while scrolling", Visibility: visibility(rng)}})
				if err != nil || r.Status != http.StatusCreated {
					publishErrs.Add(1)
				}
				done.Add(1)
			}
		})
	}
	waitFor := func(what string, cond func() bool) { e2etest.WaitFor(t, time.Minute, what, cond) }
	allSettled := func() bool {
		var n int64
		require.NoError(t, e.a.Pool.QueryRow(ctx, `
SELECT count(*) FROM social_post p WHERE NOT EXISTS (SELECT 1 FROM social_feed_post fp WHERE fp.post_id = p.post_id)`).Scan(&n))
		return n == 0
	}

	var (
		pages                 []feed.Page
		cursor                string
		committedAfter        = -1 // page index after which the held posts committed
		settledBefore         = -1 // first page read once everything had settled
		servedOn              = map[int64]int{}
		top                   key
		publishedDuringScroll int64
	)
	for {
		k := len(pages)
		if k > 0 {
			// Pace on the publishers: fifty more posts before each page.
			want := min(int64(published), int64(k*50))
			if committedAfter < 0 {
				want = min(want, beforeRelease)
			}
			waitFor("publishers", func() bool { return done.Load() >= want })
			if done.Load() == published && settledBefore < 0 {
				publishers.Wait()
				waitFor("the consumer to settle every post", allSettled)
				settledBefore = k
			}
		}
		if k == 0 {
			// Start from a top the publishers are still racing past: some of
			// their posts settled, others in flight with earlier stamps.
			waitFor("publishes to settle", func() bool {
				var n int64
				require.NoError(t, e.a.Pool.QueryRow(ctx, `
SELECT count(*) FROM social_feed_post fp JOIN social_post p USING (post_id) WHERE p.body = 'published while scrolling'`).Scan(&n))
				return n >= 40
			})
			publishedDuringScroll = done.Load()
		}
		p := e.page(t, reader, strategy, cursor, limit)
		pages = append(pages, p)
		if k == 0 {
			require.NotEmpty(t, p.Posts)
			top = key{p.Posts[0].CreatedAt, p.Posts[0].PostID}
			require.True(t, !key{heldAt, 0}.after(top), "the held posts must lie below the first page's newest")
		}
		for _, post := range p.Posts {
			_, dup := servedOn[post.PostID]
			require.False(t, dup, "post %d served twice (pages %d and %d)", post.PostID, servedOn[post.PostID], k)
			servedOn[post.PostID] = k
		}
		if committedAfter < 0 && len(p.Posts) > 0 && p.Posts[len(p.Posts)-1].CreatedAt.Before(heldAt) {
			for _, h := range held {
				post, err := e.rel.CreatePostTx(ctx, h.tx, h.author, rel.PostRequest{Body: "held", Visibility: rel.Public})
				require.NoError(t, err)
				// Stamped with its transaction's start, not its commit: the
				// same instant as the now() read when the hold began (exact,
				// no window a loaded machine could overrun).
				require.True(t, post.CreatedAt.Equal(h.at), "post %d stamped %s, its transaction began at %s", post.PostID, post.CreatedAt, h.at)
				require.NoError(t, h.tx.Commit(ctx))
				h.id = post.PostID
			}
			committedAfter = k
			close(release)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	publishers.Wait()
	require.Zero(t, publishErrs.Load(), "publishes failed")
	require.GreaterOrEqual(t, committedAfter, 0, "the scroll never passed the held posts")
	require.Greater(t, settledBefore, committedAfter, "everything must settle after the held posts commit")
	require.Less(t, settledBefore, len(pages), "the last pages must be read after everything settled")
	require.Less(t, publishedDuringScroll, int64(published), "the publishers finished before the scroll began")
	require.GreaterOrEqual(t, publishedDuringScroll, int64(40))

	// What the scroll must have served: every post the reader may read,
	// from the authors it follows, at or below the first page's newest.
	all := posts(t, e.a.Pool)
	want := map[int64]bool{}
	for _, p := range all {
		if p.visibility != rel.Self && !p.key.after(top) {
			want[p.id] = true
		}
	}
	require.Len(t, all, existing+len(held)+1+published)
	for id := range servedOn {
		require.True(t, want[id], "post %d served but not expected (SELF, or newer than the first page)", id)
	}
	for id := range want {
		_, ok := servedOn[id]
		require.True(t, ok, "post %d skipped", id)
	}
	require.Contains(t, servedOn, marker.PostID)
	lateOnPage := map[int]int{}
	for _, h := range held {
		k, ok := servedOn[h.id]
		require.True(t, ok, "held post %d skipped", h.id)
		require.Greater(t, k, committedAfter, "held post %d served before it committed?", h.id)
		lateOnPage[k]++
	}
	for k, n := range lateOnPage {
		require.GreaterOrEqual(t, pages[k].Late, n, "page %d served held posts but counted %d late arrivals", k, pages[k].Late)
	}
	var late int
	for _, p := range pages {
		late += p.Late
	}
	t.Logf("%s: %d pages, %d posts served (%d late arrivals), held posts committed after page %d, all settled before page %d, %d of %d published before the first page",
		strategy, len(pages), len(servedOn), late, committedAfter, settledBefore, publishedDuringScroll, published)

	stopConsumer()
	consumer.Wait()
	e.catchUp(t)
	e2etest.Assert(t, e.a.Pool, "social")
}
