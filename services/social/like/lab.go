package like

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Experiments are the like counters chapter's runnable claims.
var Experiments = []lab.Experiment{RedeliveryCountedOnce}

// RedeliveryCountedOnce: twenty users like a post and five take it back;
// the counter consumer applies the events, then loses its position and is
// handed the whole stream again. Its inbox row per event, written in the
// batch's transaction with the count, makes the second delivery a no-op:
// the count stays 15, equal to the facts (LIKE-I3).
//
// The naive counter keeps the count without its inbox: every delivery adds
// its ±1 again, the count doubles, and LIKE-I3 reports the item whose
// count is not its facts although the counter has caught up.
var RedeliveryCountedOnce = lab.Experiment{
	ID:         "likes/redelivery-counted-once",
	Test:       "TestLIKELabRedeliveryCountedOnce",
	Claim:      "a like counter handed the whole stream again counts each change once: the count stays equal to the facts",
	Invariants: []string{"LIKE-I1", "LIKE-I2", "LIKE-I3", "LIKE-I4"},
	Naive:      "a counter without its inbox: each delivery adds its ±1 again",
	Catches:    []string{"LIKE-I3"},
	Run:        runRedeliveryCountedOnce,
}

func runRedeliveryCountedOnce(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{})
	people := rel.NewService(a.Pool, a.Faults, nil)
	_, err := people.SetProfile(ctx, "user-0042", false)
	require.NoError(x, err)
	post, err := people.CreatePost(ctx, "user-0042", rel.PostRequest{Body: "a post to like", Visibility: rel.Public})
	require.NoError(x, err)
	item := post.PostID
	likes := NewService(a.Pool, a.Faults, nil, 0)
	for i := range 20 {
		user := fmt.Sprintf("user-%04d", 100+i)
		_, err := people.SetProfile(ctx, user, false)
		require.NoError(x, err)
		f, err := likes.Like(ctx, user, item)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: user, Action: fmt.Sprintf("like item %d", item), Outcome: lab.Accepted, Fence: f.Version})
		if i%4 == 3 {
			f, err := likes.Unlike(ctx, user, item)
			require.NoError(x, err)
			x.Step(lab.Step{Actor: user, Action: fmt.Sprintf("unlike item %d", item), Outcome: lab.Accepted, Fence: f.Version})
		}
	}
	count := func() int64 {
		var n int64
		require.NoError(x, a.Pool.QueryRow(ctx, `SELECT coalesce((SELECT n FROM social_like_count WHERE item_id = $1), 0)`, item).Scan(&n))
		return n
	}
	runner, err := outbox.NewRunner(a.Pool, likes.Counter(), outbox.Options{Owner: "counter-1"})
	require.NoError(x, err)
	n, err := runner.CatchUp(ctx)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "counter", Action: fmt.Sprintf("apply %d events", n), Outcome: lab.Accepted, Note: fmt.Sprintf("count %d", count())})
	require.EqualValues(x, 15, count())

	// The counter loses its position: the whole stream comes again.
	_, err = a.Pool.Exec(ctx, `UPDATE outbox_consumer SET position_tx = '0', position_id = 0, lease_until = now() WHERE name = $1`, ConsumerName)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "counter", Action: "restart at position 0", Outcome: lab.Lost})
	if x.Naive {
		naiveRecount(x, a, item)
		return
	}
	again, err := outbox.NewRunner(a.Pool, likes.Counter(), outbox.Options{Owner: "counter-2"})
	require.NoError(x, err)
	n, err = again.CatchUp(ctx)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "counter", Action: fmt.Sprintf("deliver %d events again", n), Outcome: lab.Replayed,
		Note: fmt.Sprintf("count %d: each event's inbox row says it was applied", count())})
	require.EqualValues(x, 15, count(), "a redelivered event changes nothing")
	x.Figure("likes", 20)
	x.Figure("unlikes", 5)
	x.Figure("count", count())
}

// naiveRecount is a counter without its inbox, done by the experiment to
// the scratch database: every delivered event adds its ±1 to the count,
// and the position moves to the end of the stream as the real counter's
// does.
func naiveRecount(x *lab.X, a *lab.App, item int64) {
	ctx := context.Background()
	rows, err := a.Pool.Query(ctx, `SELECT payload FROM outbox_event WHERE topic = $1 ORDER BY id`, Topic)
	require.NoError(x, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(x, err)
	for _, p := range payloads {
		var e Event
		require.NoError(x, json.Unmarshal(p, &e))
		delta := -1
		if e.Liked {
			delta = 1
		}
		_, err := a.Pool.Exec(ctx, `UPDATE social_like_count SET n = n + $2 WHERE item_id = $1`, e.ItemID, delta)
		require.NoError(x, err)
	}
	_, err = a.Pool.Exec(ctx, `UPDATE outbox_consumer c SET position_tx = e.tx_id, position_id = e.id
	                           FROM (SELECT tx_id, id FROM outbox_event WHERE topic = $2 ORDER BY id DESC LIMIT 1) e
	                          WHERE c.name = $1`, ConsumerName, Topic)
	require.NoError(x, err)
	var n int64
	require.NoError(x, a.Pool.QueryRow(ctx, `SELECT n FROM social_like_count WHERE item_id = $1`, item).Scan(&n))
	x.Step(lab.Step{Actor: "counter", Action: fmt.Sprintf("deliver %d events again, no inbox", len(payloads)), Outcome: lab.Violates,
		Note: fmt.Sprintf("count %d", n)})
}
