package feed_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/feed"
)

// TestSeedSocialLoadsTheGeneratedGraph: `fencelab seed social` writes the
// generator's graph — the same users, relations and posts as Generate with
// that seed — builds the hybrid inboxes, and leaves a database every
// invariant accepts, including after the fan-out consumer has passed the
// loaded events (which it skips: the load applied them). Run again, it
// refuses rather than mix two graphs.
func TestSeedSocialLoadsTheGeneratedGraph(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	run := func() (string, error) {
		cmd := exec.Command(e2etest.Binary(t), "seed", "social", "--users", "300", "--seed", "5", "--threshold", "40")
		cmd.Env = e2etest.ChildEnv(url)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run()
	require.NoError(t, err, out)
	require.Contains(t, out, "seeded 300 users")
	require.Contains(t, out, "hybrid, threshold 40")

	pool := pgtest.Pool(t, url, 4)
	g, err := feed.Generate(feed.GraphConfig{Users: 300, Seed: 5})
	require.NoError(t, err)
	var users, relations, posts, pulled int
	require.NoError(t, pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM social_user), (SELECT count(*) FROM social_relation),
       (SELECT count(*) FROM social_post), (SELECT count(*) FROM social_feed_pull_author)`).Scan(&users, &relations, &posts, &pulled))
	require.Equal(t, len(g.Users), users)
	require.Equal(t, len(g.Follows)+len(g.Blocks), relations)
	require.Equal(t, len(g.Posts), posts)
	require.Positive(t, pulled, "threshold 40 should pull the most followed authors")
	e2etest.Assert(t, pool, "social")

	hybrid, err := feed.ParseStrategy("hybrid", 40)
	require.NoError(t, err)
	cfg := feed.Config{Strategy: hybrid, CursorKey: feed.CursorKey([]byte(e2etest.Secret))}
	svc, err := feed.NewService(app.Standalone(pool), cfg)
	require.NoError(t, err)
	c := svc.Consumer()
	c.BatchSize = 1000
	r, err := outbox.NewRunner(pool, c, outbox.Options{})
	require.NoError(t, err)
	n, err := r.CatchUp(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the consumer re-applied loaded events")
	e2etest.Assert(t, pool, "FEED-I2")

	out, err = run()
	require.Error(t, err)
	require.True(t, strings.Contains(out, "already exist"), out)
}
