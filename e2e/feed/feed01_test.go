package feed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// scrolls is every reader's pages per strategy, with the problem code of
// a refused scroll.
type scrolls struct {
	mu    sync.Mutex
	pages map[string]map[string][]feed.Page
	codes map[string]map[string]string
	errs  []error
}

// readAll scrolls every reader's feed with every strategy, 8 at a time.
func readAll(t *testing.T, e *env, readers []string, limit int) *scrolls {
	t.Helper()
	s := &scrolls{pages: map[string]map[string][]feed.Page{}, codes: map[string]map[string]string{}}
	for _, r := range readers {
		s.pages[r], s.codes[r] = map[string][]feed.Page{}, map[string]string{}
	}
	work := make(chan [2]string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for w := range work {
				pages, code, err := e.scrollErr(context.Background(), t, w[0], w[1], limit)
				s.mu.Lock()
				if err != nil {
					s.errs = append(s.errs, err)
				}
				s.pages[w[0]][w[1]], s.codes[w[0]][w[1]] = pages, code
				s.mu.Unlock()
			}
		})
	}
	for _, r := range readers {
		for _, st := range feed.Strategies {
			work <- [2]string{r, st}
		}
	}
	close(work)
	wg.Wait()
	require.Empty(t, s.errs)
	return s
}

// TestFEED01ThreeStrategiesAgreeOnTwoHundredRandomReaders: one generated
// heavy-tailed graph, loaded twice — inboxes built by push (every post
// fanned out) and by hybrid (authors over the threshold pulled). For 200
// random readers every strategy scrolls the whole feed. Each scroll equals
// the feed computed independently from the generated graph (posts of
// active followees, not SELF, newest first), page by page the strategies
// agree, and the two databases agree. Push over hybrid-built inboxes
// answers exactly the readers who follow no pulled author and refuses the
// others (409) rather than miss posts.
func TestFEED01ThreeStrategiesAgreeOnTwoHundredRandomReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, err := feed.Generate(feed.GraphConfig{Users: 600, Seed: 7, PostsPerUser: 3})
	require.NoError(t, err)
	counts := g.FollowerCounts()
	byCount := slices.Clone(counts)
	slices.Sort(byCount)
	threshold := byCount[len(byCount)-15] // the 15 most followed authors are pulled
	require.Greater(t, threshold, 20)

	pushed, hybrid := setup(t, "push", threshold), setup(t, "hybrid", threshold)
	for _, e := range []*env{pushed, hybrid} {
		st := e.feed.Strategy()
		mark := time.Now()
		s, err := feed.Load(ctx, e.a.Pool, g, st)
		require.NoError(t, err)
		require.Equal(t, len(g.Posts), s.Posts)
		t.Logf("load %s: %+v in %s", st.Name(), s, time.Since(mark))
		mark = time.Now()
		e.catchUp(t)
		t.Logf("catch up %s", time.Since(mark))
	}
	truth := posts(t, pushed.a.Pool)
	require.Equal(t, truth, posts(t, hybrid.a.Pool), "the two loads gave the posts different ids")
	require.Len(t, truth, len(g.Posts))
	byID := map[int64]truthPost{}
	for i, p := range truth {
		require.Equal(t, g.Users[g.Posts[i].Author].ID, p.author)
		byID[p.id] = p
	}

	// The feed from the graph alone: whom each user follows (active), and
	// which authors hybrid pulled (over the threshold, with posts).
	followees := map[string]map[string]bool{}
	for _, f := range g.Follows {
		if !f.Pending {
			r := g.Users[f.Follower].ID
			if followees[r] == nil {
				followees[r] = map[string]bool{}
			}
			followees[r][g.Users[f.Followee].ID] = true
		}
	}
	pulled := map[string]bool{}
	for _, p := range g.Posts {
		if counts[p.Author] >= threshold {
			pulled[g.Users[p.Author].ID] = true
		}
	}
	want := func(reader string) []int64 {
		var out []int64
		for _, p := range truth {
			if followees[reader][p.author] && p.visibility != rel.Self {
				out = append(out, p.id)
			}
		}
		return newestFirst(byID, out)
	}

	rng := rand.New(rand.NewPCG(7, 1))
	var readers []string
	for _, i := range rng.Perm(len(g.Users))[:200] {
		readers = append(readers, g.Users[i].ID)
	}
	const limit = 20
	mark := time.Now()
	fromPush, fromHybrid := readAll(t, pushed, readers, limit), readAll(t, hybrid, readers, limit)
	t.Logf("reads %s", time.Since(mark))

	var refused, servedByPush, withPulled, nonEmpty int
	for _, r := range readers {
		expect := want(r)
		if len(expect) > 0 {
			nonEmpty++
		}
		ref := fromPush.pages[r]["pull"]
		require.Equal(t, expect, ids(ref), "%s: pull's scroll differs from the graph's feed", r)
		for _, st := range feed.Strategies {
			require.Empty(t, fromPush.codes[r][st], "%s %s refused on push-built inboxes", r, st)
			require.Equal(t, pageIDs(ref), pageIDs(fromPush.pages[r][st]), "%s: %s disagrees with pull on push-built inboxes", r, st)
		}
		for _, st := range []string{"pull", "hybrid"} {
			require.Empty(t, fromHybrid.codes[r][st])
			require.Equal(t, pageIDs(ref), pageIDs(fromHybrid.pages[r][st]), "%s: %s disagrees on hybrid-built inboxes", r, st)
		}
		followsPulled := false
		for a := range followees[r] {
			followsPulled = followsPulled || pulled[a]
		}
		if followsPulled {
			refused++
			require.Equal(t, "strategy_unavailable", fromHybrid.codes[r]["push"], "%s follows a pulled author", r)
			for _, id := range expect {
				if pulled[byID[id].author] {
					withPulled++
					break
				}
			}
		} else {
			servedByPush++
			require.Empty(t, fromHybrid.codes[r]["push"], r)
			require.Equal(t, pageIDs(ref), pageIDs(fromHybrid.pages[r]["push"]), "%s: push disagrees on hybrid-built inboxes", r)
		}
	}
	t.Logf("threshold %d, %d pulled authors; %d readers with posts; on hybrid-built inboxes push served %d readers and refused %d (%d of them with pulled posts in their feed)",
		threshold, len(pulled), nonEmpty, servedByPush, refused, withPulled)
	require.Greater(t, nonEmpty, 150, "most readers must have a feed")
	require.Positive(t, servedByPush, "no reader was served by push on hybrid-built inboxes")
	require.Positive(t, withPulled, "hybrid's pull side was never exercised")

	for name, e := range map[string]*env{"push-built": pushed, "hybrid-built": hybrid} {
		var served int64
		require.NoError(t, e.a.Pool.QueryRow(ctx, `SELECT count(*) FROM social_feed_served`).Scan(&served))
		require.Positive(t, served, fmt.Sprintf("%s: nothing logged for FEED-I1", name))
		mark := time.Now()
		e2etest.Assert(t, e.a.Pool, "social")
		t.Logf("invariants %s", time.Since(mark))
	}
}
