package rel

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Experiments are the relations chapter's runnable claims.
var Experiments = []lab.Experiment{ReplayDoesNotResurrect}

// ReplayDoesNotResurrect is REL-04 as a lab run: user-a follows and
// unfollows user-b three times; the followers view's consumer then loses
// its position and its inbox and replays the whole stream one event at a
// time. Every replayed "active" carries an older version than the view
// holds, so it is refused: the ended follow never comes back, not even for
// a moment between an old "active" and its "none".
//
// The naive view applies each event as it comes — state and version from
// the event, no comparison — so the replay's last word is whichever event
// came last; replaying the first follow resurrects it and REL-I3 reports
// the view that disagrees with the truth table.
var ReplayDoesNotResurrect = lab.Experiment{
	ID:         "relations/replay-does-not-resurrect",
	Test:       "TestRELLabReplayDoesNotResurrect",
	Claim:      "a view's consumer that loses its position and inbox and replays every event never resurrects an ended follow",
	Invariants: []string{"REL-I1", "REL-I2", "REL-I3"},
	Naive:      "apply each replayed event's state without comparing versions",
	Catches:    []string{"REL-I3"},
	Run:        runReplayDoesNotResurrect,
}

func runReplayDoesNotResurrect(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{})
	svc := NewService(a.Pool, a.Faults, nil)
	for _, u := range []string{"user-a", "user-b"} {
		_, err := svc.SetProfile(ctx, u, false)
		require.NoError(x, err)
	}
	for range 3 {
		for _, op := range []Op{OpFollow, OpUnfollow} {
			r, err := svc.Do(ctx, op, "user-a", "user-b")
			require.NoError(x, err)
			x.Step(lab.Step{Actor: "user-a", Action: string(op) + " user-b", Outcome: lab.Accepted, Fence: r.Version, Note: "version"})
		}
	}
	v := FollowersView
	runner, err := outbox.NewRunner(a.Pool, v.Consumer(), outbox.Options{})
	require.NoError(x, err)
	n, err := runner.CatchUp(ctx)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "consumer", Action: fmt.Sprintf("apply %d events to the followers view", n), Outcome: lab.Accepted})
	active := func() (bool, int64) {
		var on bool
		var version int64
		require.NoError(x, a.Pool.QueryRow(ctx, `SELECT active, version FROM `+v.Table+` WHERE user_id = 'user-b' AND peer_id = 'user-a'`).
			Scan(&on, &version))
		return on, version
	}

	// The consumer "restarts" with nothing: position zero, inbox lost.
	_, err = a.Pool.Exec(ctx, `DELETE FROM outbox_inbox WHERE consumer = $1`, v.ConsumerName)
	require.NoError(x, err)
	_, err = a.Pool.Exec(ctx, `UPDATE outbox_consumer SET position_tx = '0', position_id = 0, lease_until = now() WHERE name = $1`, v.ConsumerName)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "consumer", Action: "restart: position 0, inbox lost", Outcome: lab.Lost})

	if x.Naive {
		naiveReplay(x, a.Pool, v)
		return
	}
	c := v.Consumer()
	c.BatchSize = 1
	replay, err := outbox.NewRunner(a.Pool, c, outbox.Options{})
	require.NoError(x, err)
	for i := 0; ; i++ {
		n, err := replay.RunOnce(ctx)
		require.NoError(x, err)
		on, version := active()
		x.Step(lab.Step{Actor: "consumer", Action: fmt.Sprintf("replay event %d", i+1), Outcome: map[bool]string{true: "ACTIVE", false: "still ended"}[on],
			Fence: version, Note: "the view's version"})
		require.False(x, on, "replay step %d resurrected the follow", i+1)
		if n == 0 {
			break
		}
	}
}

// naiveReplay applies the stream again the naive way — each event's state
// and version written as it comes, no comparison with what the view holds
// — done by the experiment to the scratch database. The replay delivers
// every event in order and then the first one once more (a redelivery),
// and records its position at the end of the stream: the view's last word
// is the first follow, and the ended follow is back for good.
func naiveReplay(x *lab.X, pool *pgxpool.Pool, v *View) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT payload FROM outbox_event WHERE topic = 'social.rel' ORDER BY id`)
	require.NoError(x, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(x, err)
	require.NotEmpty(x, payloads)
	for i, payload := range append(payloads, payloads[0]) {
		var ev RelEvent
		require.NoError(x, json.Unmarshal(payload, &ev))
		_, err := pool.Exec(ctx, `UPDATE `+v.Table+` SET active = $3, version = $4 WHERE user_id = $1 AND peer_id = $2`,
			ev.Followee, ev.Follower, ev.State == StateActive, ev.Version)
		require.NoError(x, err)
		action := fmt.Sprintf("replay event %d (%s) without comparing versions", i+1, ev.State)
		if i == len(payloads) {
			action = fmt.Sprintf("redelivery of event 1 (%s) without comparing versions", ev.State)
		}
		x.Step(lab.Step{Actor: "consumer", Action: action, Outcome: lab.Violates, Fence: ev.Version})
	}
	_, err = pool.Exec(ctx, `UPDATE outbox_consumer c SET position_tx = e.tx_id, position_id = e.id
	                           FROM (SELECT tx_id, id FROM outbox_event WHERE topic = 'social.rel' ORDER BY id DESC LIMIT 1) e
	                          WHERE c.name = $1`, v.ConsumerName)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "consumer", Action: "record its position at the end of the stream", Note: "the view says user-a follows user-b"})
}
