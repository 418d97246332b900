package social_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/rel"
)

// opResponse is an operation's HTTP answer.
type opResponse struct {
	status int
	res    rel.Result
}

func (e *env) httpOp(t *testing.T, sub string, op rel.Op, other string) opResponse {
	t.Helper()
	path := fmt.Sprintf("/social/users/%s/%s", other, op)
	if op == rel.OpApprove || op == rel.OpReject {
		path = fmt.Sprintf("/social/requests/%s/%s", other, op)
	}
	// Called from racing goroutines: report with Errorf, never FailNow.
	tok, err := e.a.Deps.Auth.Mint(sub, httpx.RoleUser, time.Hour)
	if err != nil {
		t.Errorf("%s %s: token: %v", op, other, err)
		return opResponse{}
	}
	resp, err := e.a.Send(context.Background(), e2etest.Req{Method: "POST", Path: path, Token: tok})
	if err != nil {
		t.Errorf("%s %s: %v", op, other, err)
		return opResponse{}
	}
	out := opResponse{status: resp.Status}
	if resp.Status == http.StatusOK {
		if err := json.Unmarshal(resp.Body, &out.res); err != nil {
			t.Errorf("%s %s: %v: %s", op, other, err, resp.Body)
		}
	}
	return out
}

// TestREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState: two
// goroutines follow (and unfollow, and mix both) the same pair at once.
// First a forced timeline — the first follow holds the pair's lock at a
// pause point while the second queues behind it — then 60 unforced races
// of every combination. Each time: one row per direction, the final state
// is that of the operation that serialised last (the highest version in
// the answers), one event per change, and the views agree once caught up.
func TestREL01DoubleFollowAndUnfollowRacesLeaveOneRowInTheRightState(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.users(t, "user-a", "user-b")

	// Forced: follow #1 pauses holding both rows' locks.
	gate := e.a.Faults.Pause(rel.PointLocked, "user-a>user-b")
	first := make(chan opResponse, 1)
	go func() { first <- e.httpOp(t, "user-a", rel.OpFollow, "user-b") }()
	<-gate.Reached()
	second := make(chan opResponse, 1)
	go func() { second <- e.httpOp(t, "user-a", rel.OpFollow, "user-b") }()
	e2etest.WaitForLockWaiters(t, e.a.Pool, "", 1) // the second operation is queued behind the first
	select {
	case r := <-second:
		t.Fatalf("second follow finished while the first held the pair's lock: %+v", r)
	default:
	}
	gate.Release()
	r1, r2 := <-first, <-second
	require.Equal(t, http.StatusOK, r1.status)
	require.Equal(t, http.StatusOK, r2.status)
	require.True(t, r1.res.Changed, "the first follow changes the row")
	require.False(t, r2.res.Changed, "the second finds it active and changes nothing")
	require.Equal(t, rel.StateActive, r2.res.State)
	require.EqualValues(t, 1, r2.res.Version)

	rng := rand.New(rand.NewPCG(1, 1))
	ops := [][2]rel.Op{{rel.OpFollow, rel.OpFollow}, {rel.OpUnfollow, rel.OpUnfollow}, {rel.OpFollow, rel.OpUnfollow}, {rel.OpUnfollow, rel.OpFollow}}
	changes := int64(1)
	for round := range 60 {
		pairOps := ops[round%len(ops)]
		if rng.IntN(2) == 0 {
			pairOps = ops[rng.IntN(len(ops))]
		}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			resps [2]opResponse
		)
		for i, op := range pairOps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resps[i] = e.httpOp(t, "user-a", op, "user-b")
			}()
		}
		close(start)
		wg.Wait()
		last := resps[0].res
		for _, r := range resps {
			require.Equal(t, http.StatusOK, r.status, "round %d", round)
			if r.res.Changed {
				changes++
			}
			if r.res.Version > last.Version {
				last = r.res
			}
		}
		tr := truth(t, e.a.Pool)
		require.Len(t, tr, 2, "round %d: one row per direction", round)
		got := tr[pair{"user-a", "user-b"}]
		require.Equal(t, last.State, got.State, "round %d %v: the last serialised operation decides", round, pairOps)
		require.Equal(t, last.Version, got.Version, "round %d", round)
		require.Equal(t, changes, got.Version, "round %d: one version per change", round)
	}

	var events int64
	require.NoError(t, e.a.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_event WHERE topic = 'social.rel' AND key = 'user-b'`).Scan(&events))
	require.Equal(t, changes, events, "one event per change (REL-I1)")
	e.catchUp(t)
	for _, v := range rel.Views {
		require.Equal(t, expectedView(truth(t, e.a.Pool), v), readView(t, e.a.Pool, v), v.Name)
	}
	e2etest.Assert(t, e.a.Pool, "social")
}

// randomOps runs n random operations among users, ignoring refusals
// (blocked, not pending): a stream with every kind of transition.
func randomOps(t *testing.T, e *env, rng *rand.Rand, users []string, n int) {
	t.Helper()
	for range n {
		a, b := users[rng.IntN(len(users))], users[rng.IntN(len(users))]
		if a == b {
			continue
		}
		_, _ = e.svc.Do(context.Background(), rel.Ops[rng.IntN(len(rel.Ops))], a, b)
	}
}

// shuffledWithDuplicates returns evs in random order with about half of
// them delivered two or three times.
func shuffledWithDuplicates(rng *rand.Rand, evs []outbox.Event) []outbox.Event {
	out := append([]outbox.Event(nil), evs...)
	for _, ev := range evs {
		for range rng.IntN(3) {
			out = append(out, ev)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestREL02ShuffledDuplicatedDeliveryGivesTheInOrderView: the follower
// list built by its consumer in order equals the one built by delivering
// the same stream shuffled and duplicated, in random batches, straight to
// the view's handler (no inbox to hide duplicates): versions alone make
// the view converge (REL-I3).
func TestREL02ShuffledDuplicatedDeliveryGivesTheInOrderView(t *testing.T) {
	t.Parallel()
	e := setup(t)
	users := []string{"user-a", "user-b", "user-cp", "user-d", "user-ep", "user-f"}
	e.users(t, users...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	randomOps(t, e, rng, users, 400)
	// Whatever the random stream did, end with one live follow, so the
	// comparisons below are never between two empty views.
	_, _ = e.svc.Do(context.Background(), rel.OpUnblock, "user-a", "user-f")
	_, _ = e.svc.Do(context.Background(), rel.OpUnblock, "user-f", "user-a")
	require.Equal(t, rel.StateActive, e.do(t, rel.OpFollow, "user-a", "user-f").State)

	e.catchUp(t)
	inOrder := readView(t, e.a.Pool, rel.FollowersView)
	require.Equal(t, expectedView(truth(t, e.a.Pool), rel.FollowersView), inOrder, "seed %d", seed)
	require.NotEmpty(t, inOrder.Counts, "seed %d: the stream should leave someone followed", seed)

	evs := relEvents(t, e.a.Pool, 0)
	for round := range 5 {
		resetView(t, e.a.Pool, rel.FollowersView)
		deliver(t, e.a.Pool, rel.FollowersView, shuffledWithDuplicates(rng, evs), func() int { return 1 + rng.IntN(40) })
		require.Equal(t, inOrder, readView(t, e.a.Pool, rel.FollowersView), "seed %d, round %d", seed, round)
	}
	e2etest.Assert(t, e.a.Pool, "social")
}

// TestREL03BlockRevokesReadsTheMomentItCommits: (1) a block while a
// follow request is pending — and racing the owner's approval of it —
// leaves no grant, whichever wins; (2) a block while the follower views
// still say "follows" (their events not yet applied): reads of
// FOLLOWERS (and PUBLIC) content are refused from the commit on, while
// the paused, uncommitted block changes nothing for readers.
func TestREL03BlockRevokesReadsTheMomentItCommits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.users(t, "user-ownerp", "user-a")
	ctx := context.Background()

	// (1) pending request; the owner's approval races the owner's block.
	for round := range 20 {
		requester := fmt.Sprintf("user-r%02d", round)
		e.users(t, requester)
		require.Equal(t, rel.StatePending, e.do(t, rel.OpFollow, requester, "user-ownerp").State)
		p := e.post(t, "user-ownerp", rel.Followers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		var approve, block opResponse
		wg.Add(2)
		go func() { defer wg.Done(); <-start; approve = e.httpOp(t, "user-ownerp", rel.OpApprove, requester) }()
		go func() { defer wg.Done(); <-start; block = e.httpOp(t, "user-ownerp", rel.OpBlock, requester) }()
		close(start)
		wg.Wait()
		require.Equal(t, http.StatusOK, block.status)
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, approve.status, "approve wins or finds no request")
		requireStatus(t, e.read(t, requester, p.PostID), http.StatusForbidden, "forbidden")
		requireStatus(t, e.call(t, requester, "POST", "/social/users/user-ownerp/follow", nil), http.StatusForbidden, "blocked")
		requireStatus(t, e.call(t, "user-ownerp", "POST", "/social/requests/"+requester+"/approve", nil), http.StatusConflict, "not_pending")
		ab, ba, err := e.svc.Relations(ctx, requester, "user-ownerp")
		require.NoError(t, err)
		require.Equal(t, rel.StateNone, ab.State)
		require.Equal(t, rel.StateBlocked, ba.State)
	}

	// (2) an approved follower, views caught up: they say user-a follows.
	e.do(t, rel.OpFollow, "user-a", "user-ownerp")
	e.do(t, rel.OpApprove, "user-ownerp", "user-a")
	followersOnly, public := e.post(t, "user-ownerp", rel.Followers), e.post(t, "user-ownerp", rel.Public)
	e.catchUp(t)
	require.True(t, readView(t, e.a.Pool, rel.FollowersView).Rows[pair{"user-a", "user-ownerp"}].Active)
	requireStatus(t, e.read(t, "user-a", followersOnly.PostID), http.StatusOK, "")

	// The block pauses before its commit: readers still see the grant.
	gate := e.a.Faults.Pause(rel.PointBeforeCommit, "user-ownerp>user-a")
	blocked := make(chan opResponse, 1)
	go func() { blocked <- e.httpOp(t, "user-ownerp", rel.OpBlock, "user-a") }()
	<-gate.Reached()
	requireStatus(t, e.read(t, "user-a", followersOnly.PostID), http.StatusOK, "")
	gate.Release()
	require.Equal(t, http.StatusOK, (<-blocked).status)

	// Committed: refused at once, while both views still hold the old
	// "follows" — the read path never consults them.
	requireStatus(t, e.read(t, "user-a", followersOnly.PostID), http.StatusForbidden, "forbidden")
	requireStatus(t, e.read(t, "user-a", public.PostID), http.StatusForbidden, "forbidden")
	var page rel.PostPage
	r := e.call(t, "user-a", "GET", "/social/users/user-ownerp/posts", nil)
	requireStatus(t, r, http.StatusOK, "")
	r.JSON(t, &page)
	require.Empty(t, page.Posts)
	require.True(t, readView(t, e.a.Pool, rel.FollowersView).Rows[pair{"user-a", "user-ownerp"}].Active, "the view is stale")
	require.True(t, readView(t, e.a.Pool, rel.FollowingView).Rows[pair{"user-a", "user-ownerp"}].Active, "the view is stale")
	// REL-I4 holds meanwhile: the disagreement is covered by a pending event.
	e2etest.Assert(t, e.a.Pool, "social")

	e.catchUp(t)
	require.False(t, readView(t, e.a.Pool, rel.FollowersView).Rows[pair{"user-a", "user-ownerp"}].Active)
	requireStatus(t, e.read(t, "user-a", followersOnly.PostID), http.StatusForbidden, "forbidden")
	e2etest.Assert(t, e.a.Pool, "social")
}

// TestREL04ResetOffsetAndReplayDoesNotResurrect: follows that ended
// (unfollow, rejection, block) stay ended when a view's consumer loses
// its position and replays the stream from zero — with its inbox (the
// replay is skipped), without it (every event applied again, the versions
// refuse the old ones), and after the view itself was lost and rebuilt
// from the truth table — checked after every replayed event, since a
// resurrection by replay is a moment between an old "active" and its
// "none".
func TestREL04ResetOffsetAndReplayDoesNotResurrect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.users(t, "user-a", "user-b", "user-cp", "user-d")
	for range 3 {
		e.do(t, rel.OpFollow, "user-a", "user-b")
		e.do(t, rel.OpUnfollow, "user-a", "user-b")
	}
	e.do(t, rel.OpFollow, "user-d", "user-cp")
	e.do(t, rel.OpApprove, "user-cp", "user-d")
	e.do(t, rel.OpBlock, "user-cp", "user-d")
	e.do(t, rel.OpFollow, "user-b", "user-cp")
	e.do(t, rel.OpReject, "user-cp", "user-b")
	e.do(t, rel.OpFollow, "user-b", "user-a") // one follow that stays
	e.catchUp(t)
	want := map[string]snapshot{}
	for _, v := range rel.Views {
		want[v.Name] = readView(t, e.a.Pool, v)
		require.Equal(t, expectedView(truth(t, e.a.Pool), v), want[v.Name])
	}
	require.False(t, want["followers"].Rows[pair{"user-a", "user-b"}].Active)
	require.Equal(t, map[string]int64{"user-a": 1}, want["followers"].Counts)

	ctx := context.Background()
	exec := func(sql string, args ...any) {
		_, err := e.a.Pool.Exec(ctx, sql, args...)
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
			resetView(t, e.a.Pool, v)
			require.NoError(t, v.Rebuild(ctx, e.a.Pool))
			require.Equal(t, want[v.Name], readView(t, e.a.Pool, v), "rebuilt %s", v.Name)
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
			r, err := outbox.NewRunner(e.a.Pool, c, outbox.Options{})
			require.NoError(t, err)
			for i := 0; ; i++ {
				n, err := r.RunOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, want[v.Name], readView(t, e.a.Pool, v), "%s: %s: replay step %d", step.name, v.Name, i)
				if n == 0 && i > 0 {
					break
				}
			}
			_, err = r.CatchUp(ctx)
			require.NoError(t, err)
			e.runners[v.Name] = r
		}
		for _, v := range rel.Views {
			require.Equal(t, want[v.Name], readView(t, e.a.Pool, v), "%s: %s", step.name, v.Name)
		}
		e2etest.Assert(t, e.a.Pool, "social")
	}
	requireStatus(t, e.read(t, "user-d", e.post(t, "user-cp", rel.Public).PostID), http.StatusForbidden, "forbidden")
}

// The lab's relations experiment: a replay after a lost position and inbox
// resurrects nothing (and the naive view, applying without versions, does).
func TestRELLabReplayDoesNotResurrect(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, rel.ReplayDoesNotResurrect)
}
