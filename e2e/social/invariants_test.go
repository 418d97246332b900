package social_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	relations "github.com/fencelab/fencelab/lab/relations"
	"github.com/fencelab/fencelab/services/social/rel"
)

// TestRELInvariantsCatchEachCorruption: on a healthy, caught-up database
// every REL invariant holds; each corruption below — written behind the
// service's back, inside a transaction rolled back afterwards — makes its
// invariant report rows. A check that cannot fail would prove nothing.
func TestRELInvariantsCatchEachCorruption(t *testing.T) {
	e := e2etest.StartLab(t, relations.StartLab, e2etest.Options{})
	e.Users(t, "user-a", "user-b", "user-c")
	e.DoOp(t, rel.OpFollow, "user-a", "user-b")
	e.DoOp(t, rel.OpFollow, "user-c", "user-b")
	e.CatchUp(t)
	e2etest.Assert(t, e.Pool, "social")

	e2etest.RequireCaught(t, e.Pool, []e2etest.Corruption{
		{ID: "REL-I1", Name: "a change without its event", SQL: []string{
			`UPDATE social_relation SET state = 'none', version = version + 1 WHERE follower = 'user-a' AND followee = 'user-b'`}},
		{ID: "REL-I1", Name: "two events for one version", SQL: []string{
			`INSERT INTO outbox_event (topic, key, payload) VALUES ('social.rel', 'user-b',
			  '{"follower":"user-a","followee":"user-b","state":"active","version":1,"op":"follow"}')`}},
		{ID: "REL-I2", Name: "a block beside a follow", SQL: []string{
			`UPDATE social_relation SET state = 'blocked', version = version + 1, event_id = 0, changed_tx = pg_current_xact_id()
			  WHERE follower = 'user-b' AND followee = 'user-a'`}},
		{ID: "REL-I3", Name: "a view ahead of the truth", SQL: []string{
			`UPDATE social_followers SET version = version + 5 WHERE user_id = 'user-b' AND peer_id = 'user-a'`}},
		{ID: "REL-I3", Name: "a caught-up view behind the truth", SQL: []string{
			`UPDATE social_following SET version = 0 + 1, active = false WHERE user_id = 'user-c'`,
			`UPDATE social_relation SET state = 'none', version = version + 1 WHERE follower = 'user-c' AND followee = 'user-b'`}},
		{ID: "REL-I4", Name: "a view granting what the truth does not", SQL: []string{
			`UPDATE social_followers SET active = false WHERE user_id = 'user-b' AND peer_id = 'user-a'`}},
		{ID: "REL-I4", Name: "a count off its view", SQL: []string{
			`UPDATE social_follower_count SET n = n + 1 WHERE user_id = 'user-b'`}},
		{ID: "REL-I4", Name: "a lag beyond the declared bound", SQL: []string{
			`INSERT INTO outbox_event (topic, key, payload, created_at) VALUES ('social.rel', 'user-c',
			  '{"follower":"user-b","followee":"user-c","state":"none","version":1,"op":"unfollow"}', now() - interval '2 minutes')`}},
	})
	e2etest.Assert(t, e.Pool, "social")
}

// TestRELTruthRowsAreNeverDeletedAndVersionsOnlyGrow: the guard trigger
// is the first line of REL-I1 and REL-I3 (a deleted row would restart its
// version and every view would ignore the pair's new events).
func TestRELTruthRowsAreNeverDeletedAndVersionsOnlyGrow(t *testing.T) {
	e := e2etest.StartLab(t, relations.StartLab, e2etest.Options{})
	e.Users(t, "user-a", "user-b")
	e.DoOp(t, rel.OpFollow, "user-a", "user-b")
	ctx := context.Background()
	for _, sql := range []string{
		`DELETE FROM social_relation WHERE follower = 'user-a'`,
		`UPDATE social_relation SET state = 'none' WHERE follower = 'user-a'`,
		`UPDATE social_relation SET state = 'none', version = version + 2 WHERE follower = 'user-a'`,
		`UPDATE social_relation SET version = version - 1 WHERE follower = 'user-a'`,
	} {
		_, err := e.Pool.Exec(ctx, sql)
		require.Error(t, err, sql)
	}
	require.EqualValues(t, 1, relations.Truth(t, e.Pool)[relations.Pair{Follower: "user-a", Followee: "user-b"}].Version)
	e2etest.Assert(t, e.Pool, "social")
}

// TestRELReadablePostsIsInlined: social_readable_posts is a SQL function
// the planner inlines into the caller's query (no opaque Function Scan),
// so a feed that re-checks a page with it gets index scans and joins.
func TestRELReadablePostsIsInlined(t *testing.T) {
	e := e2etest.StartLab(t, relations.StartLab, e2etest.Options{})
	e.Users(t, "user-a", "user-b")
	p := e.Post(t, "user-b", rel.Public)
	rows, err := e.Pool.Query(context.Background(),
		`EXPLAIN SELECT p.post_id FROM social_readable_posts($1) p WHERE p.post_id = ANY ($2)`, "user-a", []int64{p.PostID})
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.NotContains(t, plan, "Function Scan", plan)
	require.Contains(t, plan, "social_post", plan)
	ok, err := rel.AccessCheck(context.Background(), e.Pool, "user-a", p.PostID)
	require.NoError(t, err)
	require.True(t, ok)
}
