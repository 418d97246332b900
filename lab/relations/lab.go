package relations

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Experiments are the relations chapter's runnable claims.
var Experiments = []lab.Experiment{
	ReplayDoesNotResurrect, DoubleFollowRaces, ShuffledDuplicatedDelivery, BlockRevokesOnCommit, ResetOffsetReplay,
}

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
	Control:    "the same version-blind replay delivered in order, without the redelivery: the last word is the last event",
	Run:        runReplayDoesNotResurrect,
}

func runReplayDoesNotResurrect(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{})
	svc := labkit.People(x, a, "user-a", "user-b")
	for range 3 {
		for _, op := range []rel.Op{rel.OpFollow, rel.OpUnfollow} {
			r, err := svc.Do(ctx, op, "user-a", "user-b")
			require.NoError(x, err)
			x.Step(lab.Step{Actor: "user-a", Action: string(op) + " user-b", Outcome: lab.Accepted, Note: fmt.Sprintf("version %d", r.Version)})
		}
	}
	v := rel.FollowersView
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
			Note: fmt.Sprintf("the view's version %d", version)})
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
func naiveReplay(x *lab.X, pool *pgxpool.Pool, v *rel.View) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT payload FROM outbox_event WHERE topic = 'social.rel' ORDER BY id`)
	require.NoError(x, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(x, err)
	require.NotEmpty(x, payloads)
	stream := append(payloads[:len(payloads):len(payloads)], payloads[0])
	if x.Control {
		stream = payloads // in order, each event once: nothing arrives late
	}
	for i, payload := range stream {
		var ev rel.RelEvent
		require.NoError(x, json.Unmarshal(payload, &ev))
		_, err := pool.Exec(ctx, `UPDATE `+v.Table+` SET active = $3, version = $4 WHERE user_id = $1 AND peer_id = $2`,
			ev.Followee, ev.Follower, ev.State == rel.StateActive, ev.Version)
		require.NoError(x, err)
		action := fmt.Sprintf("replay event %d (%s) without comparing versions", i+1, ev.State)
		if i == len(payloads) {
			action = fmt.Sprintf("redelivery of event 1 (%s) without comparing versions", ev.State)
		}
		x.Step(lab.Step{Actor: "consumer", Action: action, Outcome: "applied", Note: fmt.Sprintf("event version %d", ev.Version)})
	}
	_, err = pool.Exec(ctx, `UPDATE outbox_consumer c SET position_tx = e.tx_id, position_id = e.id
	                           FROM (SELECT tx_id, id FROM outbox_event WHERE topic = 'social.rel' ORDER BY id DESC LIMIT 1) e
	                          WHERE c.name = $1`, v.ConsumerName)
	require.NoError(x, err)
	var follows bool
	require.NoError(x, pool.QueryRow(ctx, `SELECT coalesce(bool_or(active), false) FROM `+v.Table+` WHERE user_id = 'user-b' AND peer_id = 'user-a'`).Scan(&follows))
	x.Step(lab.Step{Actor: "consumer", Action: "record its position at the end of the stream",
		Note: map[bool]string{true: "the view says the ended follow is active", false: "the view says the follow ended"}[follows]})
}

// DoubleFollowRaces is REL-01: two racing follows (and unfollows, and
// both mixed) of the same pair, first forced with a pause holding the
// pair's lock, then 60 unforced races.
var DoubleFollowRaces = lab.Experiment{
	ID:         "relations/double-follow-races",
	Test:       "TestREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState",
	Claim:      "racing follows and unfollows of one pair leave one row per direction, in the state of the operation that serialised last, with one event per change",
	Overlap:    true,
	Invariants: []string{"social"},
	Run:        runREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState,
}

// ShuffledDuplicatedDelivery is REL-02: the follower list built in order
// equals the one built from the same stream shuffled and duplicated.
var ShuffledDuplicatedDelivery = lab.Experiment{
	ID:         "relations/shuffled-duplicated-delivery",
	Test:       "TestREL02ShuffledDuplicatedDeliveryGivesTheInOrderView",
	Claim:      "a view fed the stream shuffled and duplicated, without its inbox, converges to the in-order view: the versions alone decide",
	Invariants: []string{"social"},
	Run:        runREL02ShuffledDuplicatedDeliveryGivesTheInOrderView,
}

// BlockRevokesOnCommit is REL-03: a block revokes reads from its commit
// on, whatever the views still say, and no approval racing it grants.
var BlockRevokesOnCommit = lab.Experiment{
	ID:         "relations/block-revokes-on-commit",
	Test:       "TestREL03BlockRevokesReadsTheMomentItCommits",
	Claim:      "a block refuses the blocked reader from the moment it commits, while the follower views still say \"follows\", and an approval racing it grants nothing",
	Overlap:    true,
	Invariants: []string{"social"},
	Naive:      "a read authorised from the lagging view: the feed page asks the followers view, not the truth table, whether the reader follows the author, and the view has not applied the block yet",
	Catches:    []string{"FEED-I1", "REL-I2"},
	Control:    "the same view-authorised read after the view has applied the block: nothing is served",
	Explore:    followBlockExplore,
	Run: func(x *lab.X) {
		if x.Naive {
			naiveViewRead(x)
			return
		}
		runREL03BlockRevokesReadsTheMomentItCommits(x)
	},
}

// ResetOffsetReplay is REL-04: every view's consumer replays from zero
// with its inbox, without it, and after the view was rebuilt; no ended
// follow comes back, checked after every replayed event.
var ResetOffsetReplay = lab.Experiment{
	ID:         "relations/reset-offset-replay",
	Test:       "TestREL04ResetOffsetAndReplayDoesNotResurrect",
	Claim:      "follows that ended stay ended when every view replays the stream from zero — with its inbox, without it, and after a rebuild from the truth table",
	Invariants: []string{"social"},
	Run:        runREL04ResetOffsetAndReplayDoesNotResurrect,
}

// RandomOps runs n random operations among users, ignoring refusals
// (blocked, not pending): a stream with every kind of transition.
func RandomOps(t lab.T, e *Lab, rng *rand.Rand, users []string, n int) {
	t.Helper()
	for range n {
		a, b := users[rng.IntN(len(users))], users[rng.IntN(len(users))]
		if a == b {
			continue
		}
		_, _ = e.Svc.Do(context.Background(), rel.Ops[rng.IntN(len(rel.Ops))], a, b)
	}
}

// ShuffledWithDuplicates returns evs in random order with about half of
// them delivered two or three times.
func ShuffledWithDuplicates(rng *rand.Rand, evs []outbox.Event) []outbox.Event {
	out := append([]outbox.Event(nil), evs...)
	for _, ev := range evs {
		for range rng.IntN(3) {
			out = append(out, ev)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// REL-01 (TestREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState): two
// goroutines follow (and unfollow, and mix both) the same pair at once.
// First a forced timeline — the first follow holds the pair's lock at a
// pause point while the second queues behind it — then 60 unforced races
// of every combination. Each time: one row per direction, the final state
// is that of the operation that serialised last (the highest version in
// the answers), one event per change, and the views agree once caught up.
func runREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState(x *lab.X) {
	t := x
	e := StartLab(x, lab.Options{})
	e.Users(t, "user-a", "user-b")

	// Forced: follow #1 pauses holding both rows' locks.
	gate := e.Faults.Pause(rel.PointLocked, "user-a>user-b")
	first := make(chan OpResponse, 1)
	go func() { first <- e.HTTPOp(t, "user-a", rel.OpFollow, "user-b") }()
	<-gate.Reached()
	second := make(chan OpResponse, 1)
	go func() { second <- e.HTTPOp(t, "user-a", rel.OpFollow, "user-b") }()
	lab.WaitForLockWaiters(t, e.Pool, "", 1) // the second operation is queued behind the first
	select {
	case r := <-second:
		t.Fatalf("second follow finished while the first held the pair's lock: %+v", r)
	default:
	}
	// The overlap is observed at the database before the release: the
	// second follow's lock wait, seen in pg_stat_activity.
	lab.WaitFor(t, lab.DefaultWait, "the overlap watcher to see the second follow's lock wait", x.Overlapped)
	gate.Release()
	r1, r2 := <-first, <-second
	require.Equal(t, http.StatusOK, r1.Status)
	require.Equal(t, http.StatusOK, r2.Status)
	require.True(t, r1.Res.Changed, "the first follow changes the row")
	require.False(t, r2.Res.Changed, "the second finds it active and changes nothing")
	require.Equal(t, rel.StateActive, r2.Res.State)
	require.EqualValues(t, 1, r2.Res.Version)

	rng := rand.New(rand.NewPCG(1, 1))
	ops := [][2]rel.Op{{rel.OpFollow, rel.OpFollow}, {rel.OpUnfollow, rel.OpUnfollow}, {rel.OpFollow, rel.OpUnfollow}, {rel.OpUnfollow, rel.OpFollow}}
	changes := int64(1)
	for round := range 60 {
		pairOps := ops[round%len(ops)]
		if rng.IntN(2) == 0 {
			pairOps = ops[rng.IntN(len(ops))]
		}
		var resps [2]OpResponse
		lab.AtOnce(len(pairOps), func(i int) {
			resps[i] = e.HTTPOp(t, "user-a", pairOps[i], "user-b")
		})
		last := resps[0].Res
		for _, r := range resps {
			require.Equal(t, http.StatusOK, r.Status, "round %d", round)
			if r.Res.Changed {
				changes++
			}
			if r.Res.Version > last.Version {
				last = r.Res
			}
		}
		tr := Truth(t, e.Pool)
		require.Len(t, tr, 2, "round %d: one row per direction", round)
		got := tr[Pair{Follower: "user-a", Followee: "user-b"}]
		require.Equal(t, last.State, got.State, "round %d %v: the last serialised operation decides", round, pairOps)
		require.Equal(t, last.Version, got.Version, "round %d", round)
		require.Equal(t, changes, got.Version, "round %d: one version per change", round)
	}

	var events int64
	require.NoError(t, e.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_event WHERE topic = 'social.rel' AND key = 'user-b'`).Scan(&events))
	require.Equal(t, changes, events, "one event per change (REL-I1)")
	e.CatchUp(t)
	for _, v := range rel.Views {
		require.Equal(t, ExpectedView(Truth(t, e.Pool), v), ReadView(t, e.Pool, v), v.Name)
	}
}

// REL-02 (TestREL02ShuffledDuplicatedDeliveryGivesTheInOrderView): the follower
// list built by its consumer in order equals the one built by delivering
// the same stream shuffled and duplicated, in random batches, straight to
// the view's handler (no inbox to hide duplicates): versions alone make
// the view converge (REL-I3).
func runREL02ShuffledDuplicatedDeliveryGivesTheInOrderView(x *lab.X) {
	t := x
	e := StartLab(x, lab.Options{})
	users := []string{"user-a", "user-b", "user-cp", "user-d", "user-ep", "user-f"}
	e.Users(t, users...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	RandomOps(t, e, rng, users, 400)
	// Whatever the random stream did, end with one live follow, so the
	// comparisons below are never between two empty views.
	_, _ = e.Svc.Do(context.Background(), rel.OpUnblock, "user-a", "user-f")
	_, _ = e.Svc.Do(context.Background(), rel.OpUnblock, "user-f", "user-a")
	require.Equal(t, rel.StateActive, e.DoOp(t, rel.OpFollow, "user-a", "user-f").State)

	e.CatchUp(t)
	inOrder := ReadView(t, e.Pool, rel.FollowersView)
	require.Equal(t, ExpectedView(Truth(t, e.Pool), rel.FollowersView), inOrder, "seed %d", seed)
	require.NotEmpty(t, inOrder.Counts, "seed %d: the stream should leave someone followed", seed)

	evs := RelEvents(t, e.Pool, 0)
	for round := range 5 {
		ResetView(t, e.Pool, rel.FollowersView)
		Deliver(t, e.Pool, rel.FollowersView, ShuffledWithDuplicates(rng, evs), func() int { return 1 + rng.IntN(40) })
		require.Equal(t, inOrder, ReadView(t, e.Pool, rel.FollowersView), "seed %d, round %d", seed, round)
	}
}

// REL-03 (TestREL03BlockRevokesReadsTheMomentItCommits): (1) a block while a
// follow request is pending — and racing the owner's approval of it —
// leaves no grant, whichever wins; (2) a block while the follower views
// still say "follows" (their events not yet applied): reads of
// FOLLOWERS (and PUBLIC) content are refused from the commit on, while
// the paused, uncommitted block changes nothing for readers.
func runREL03BlockRevokesReadsTheMomentItCommits(x *lab.X) {
	t := x
	e := StartLab(x, lab.Options{})
	e.Users(t, "user-ownerp", "user-a")
	ctx := context.Background()

	// (1) pending request; the owner's approval races the owner's block.
	// First forced: the block holds the pair's lock at a pause point while
	// the approval queues behind it — a lock wait the run observes at the
	// database (Overlap), so "racing" is a fact of this run, not a hope.
	e.Users(t, "user-rforced")
	require.Equal(t, rel.StatePending, e.DoOp(t, rel.OpFollow, "user-rforced", "user-ownerp").State)
	lockGate := e.Faults.Pause(rel.PointLocked, "user-ownerp>user-rforced")
	blockedFirst := make(chan OpResponse, 1)
	go func() { blockedFirst <- e.HTTPOp(t, "user-ownerp", rel.OpBlock, "user-rforced") }()
	lab.WaitOrTimeout(t, lockGate.Reached(), "the block never took the pair's lock")
	approvedLate := make(chan OpResponse, 1)
	go func() { approvedLate <- e.HTTPOp(t, "user-ownerp", rel.OpApprove, "user-rforced") }()
	lab.WaitForLockWaiters(t, e.Pool, "", 1)
	lab.WaitFor(t, lab.DefaultWait, "the overlap watcher to see the approval's lock wait", x.Overlapped)
	x.Step(lab.Step{Actor: "user-ownerp", Action: "approve user-rforced while the block holds the pair's lock", Outcome: "waiting", DBTime: x.DBNow(e.Pool)})
	lockGate.Release()
	require.Equal(t, http.StatusOK, lab.WaitOrTimeout(t, blockedFirst, "the block did not finish").Status)
	require.Equal(t, http.StatusConflict, lab.WaitOrTimeout(t, approvedLate, "the approval did not finish").Status, "the request is no longer pending")
	x.Step(lab.Step{Actor: "user-ownerp", Action: "approve user-rforced, after the block committed", Outcome: lab.Refused, Note: "not_pending: the block ended the request"})
	for round := range 20 {
		requester := fmt.Sprintf("user-r%02d", round)
		e.Users(t, requester)
		require.Equal(t, rel.StatePending, e.DoOp(t, rel.OpFollow, requester, "user-ownerp").State)
		p := e.Post(t, "user-ownerp", rel.Followers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		var approve, block OpResponse
		wg.Add(2)
		go func() { defer wg.Done(); <-start; approve = e.HTTPOp(t, "user-ownerp", rel.OpApprove, requester) }()
		go func() { defer wg.Done(); <-start; block = e.HTTPOp(t, "user-ownerp", rel.OpBlock, requester) }()
		close(start)
		wg.Wait()
		require.Equal(t, http.StatusOK, block.Status)
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, approve.Status, "approve wins or finds no request")
		RequireStatus(t, e.Read(t, requester, p.PostID), http.StatusForbidden, "forbidden")
		RequireStatus(t, e.Call(t, requester, "POST", "/social/users/user-ownerp/follow", nil), http.StatusForbidden, "blocked")
		RequireStatus(t, e.Call(t, "user-ownerp", "POST", "/social/requests/"+requester+"/approve", nil), http.StatusConflict, "not_pending")
		ab, ba, err := e.Svc.Relations(ctx, requester, "user-ownerp")
		require.NoError(t, err)
		require.Equal(t, rel.StateNone, ab.State)
		require.Equal(t, rel.StateBlocked, ba.State)
	}

	// (2) an approved follower, views caught up: they say user-a follows.
	e.DoOp(t, rel.OpFollow, "user-a", "user-ownerp")
	e.DoOp(t, rel.OpApprove, "user-ownerp", "user-a")
	followersOnly, public := e.Post(t, "user-ownerp", rel.Followers), e.Post(t, "user-ownerp", rel.Public)
	e.CatchUp(t)
	require.True(t, ReadView(t, e.Pool, rel.FollowersView).Rows[Pair{Follower: "user-a", Followee: "user-ownerp"}].Active)
	RequireStatus(t, e.Read(t, "user-a", followersOnly.PostID), http.StatusOK, "")

	// The block pauses before its commit: readers still see the grant.
	gate := e.Faults.Pause(rel.PointBeforeCommit, "user-ownerp>user-a")
	blocked := make(chan OpResponse, 1)
	go func() { blocked <- e.HTTPOp(t, "user-ownerp", rel.OpBlock, "user-a") }()
	<-gate.Reached()
	RequireStatus(t, e.Read(t, "user-a", followersOnly.PostID), http.StatusOK, "")
	gate.Release()
	require.Equal(t, http.StatusOK, (<-blocked).Status)

	// Committed: refused at once, while both views still hold the old
	// "follows" — the read path never consults them.
	RequireStatus(t, e.Read(t, "user-a", followersOnly.PostID), http.StatusForbidden, "forbidden")
	RequireStatus(t, e.Read(t, "user-a", public.PostID), http.StatusForbidden, "forbidden")
	var page rel.PostPage
	r := e.Call(t, "user-a", "GET", "/social/users/user-ownerp/posts", nil)
	RequireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &page)
	require.Empty(t, page.Posts)
	require.True(t, ReadView(t, e.Pool, rel.FollowersView).Rows[Pair{Follower: "user-a", Followee: "user-ownerp"}].Active, "the view is stale")
	require.True(t, ReadView(t, e.Pool, rel.FollowingView).Rows[Pair{Follower: "user-a", Followee: "user-ownerp"}].Active, "the view is stale")
	// REL-I4 holds meanwhile: the disagreement is covered by a pending event.
	x.Assert(e.Pool, "social")

	e.CatchUp(t)
	require.False(t, ReadView(t, e.Pool, rel.FollowersView).Rows[Pair{Follower: "user-a", Followee: "user-ownerp"}].Active)
	RequireStatus(t, e.Read(t, "user-a", followersOnly.PostID), http.StatusForbidden, "forbidden")
}

// REL-04 (TestREL04ResetOffsetAndReplayDoesNotResurrect): follows that ended
// (unfollow, rejection, block) stay ended when a view's consumer loses
// its position and replays the stream from zero — with its inbox (the
// replay is skipped), without it (every event applied again, the versions
// refuse the old ones), and after the view itself was lost and rebuilt
// from the truth table — checked after every replayed event, since a
// resurrection by replay is a moment between an old "active" and its
// "none".
func runREL04ResetOffsetAndReplayDoesNotResurrect(x *lab.X) {
	t := x
	e := StartLab(x, lab.Options{})
	e.Users(t, "user-a", "user-b", "user-cp", "user-d")
	for range 3 {
		e.DoOp(t, rel.OpFollow, "user-a", "user-b")
		e.DoOp(t, rel.OpUnfollow, "user-a", "user-b")
	}
	e.DoOp(t, rel.OpFollow, "user-d", "user-cp")
	e.DoOp(t, rel.OpApprove, "user-cp", "user-d")
	e.DoOp(t, rel.OpBlock, "user-cp", "user-d")
	e.DoOp(t, rel.OpFollow, "user-b", "user-cp")
	e.DoOp(t, rel.OpReject, "user-cp", "user-b")
	e.DoOp(t, rel.OpFollow, "user-b", "user-a") // one follow that stays
	e.CatchUp(t)
	want := map[string]Snapshot{}
	for _, v := range rel.Views {
		want[v.Name] = ReadView(t, e.Pool, v)
		require.Equal(t, ExpectedView(Truth(t, e.Pool), v), want[v.Name])
	}
	require.False(t, want["followers"].Rows[Pair{Follower: "user-a", Followee: "user-b"}].Active)
	require.Equal(t, map[string]int64{"user-a": 1}, want["followers"].Counts)

	ctx := context.Background()
	exec := func(sql string, args ...any) {
		_, err := e.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	for _, step := range []struct {
		name  string
		reset func(v *rel.View)
	}{
		{"position to zero, inbox kept", func(*rel.View) {}},
		{"position to zero, inbox lost", func(v *rel.View) {
			exec(`DELETE FROM outbox_inbox WHERE consumer = $1`, v.ConsumerName)
		}},
		{"view lost, rebuilt from the truth table", func(v *rel.View) {
			exec(`DELETE FROM outbox_inbox WHERE consumer = $1`, v.ConsumerName)
			ResetView(t, e.Pool, v)
			require.NoError(t, v.Rebuild(ctx, e.Pool))
			require.Equal(t, want[v.Name], ReadView(t, e.Pool, v), "rebuilt %s", v.Name)
		}},
	} {
		for _, v := range rel.Views {
			step.reset(v)
			// The consumer "restarts": its lease ends, its position is zero.
			exec(`UPDATE outbox_consumer SET position_tx = '0', position_id = 0, lease_until = now() WHERE name = $1`, v.ConsumerName)
			// It replays one event per batch, and after every batch the
			// view holds no ended follow: an old "active" never shows,
			// not even for the moment before its "none" is replayed.
			c := v.Consumer()
			c.BatchSize = 1
			r, err := outbox.NewRunner(e.Pool, c, outbox.Options{})
			require.NoError(t, err)
			for i := 0; ; i++ {
				n, err := r.RunOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, want[v.Name], ReadView(t, e.Pool, v), "%s: %s: replay step %d", step.name, v.Name, i)
				if n == 0 && i > 0 {
					break
				}
			}
			_, err = r.CatchUp(ctx)
			require.NoError(t, err)
			e.Runners[v.Name] = r
		}
		for _, v := range rel.Views {
			require.Equal(t, want[v.Name], ReadView(t, e.Pool, v), "%s: %s", step.name, v.Name)
		}
		x.Assert(e.Pool, "social")
	}
	RequireStatus(t, e.Read(t, "user-d", e.Post(t, "user-cp", rel.Public).PostID), http.StatusForbidden, "forbidden")
}
