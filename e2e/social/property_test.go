package social_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/e2e/e2etest"
	relations "github.com/fencelab/fencelab/lab/relations"
	"github.com/fencelab/fencelab/services/social/rel"
)

// model is the in-test statement of the rules: a map of pair states, the
// private flags and the posts, with the operations and AccessCheck
// written as plainly as possible.
type model struct {
	private map[string]bool
	state   map[relations.Pair]rel.State
	posts   map[int64]rel.Post
}

func (m *model) st(a, b string) rel.State {
	if s, ok := m.state[relations.Pair{Follower: a, Followee: b}]; ok {
		return s
	}
	return rel.StateNone
}

func (m *model) set(a, b string, s rel.State) bool {
	if m.st(a, b) == s {
		return false
	}
	m.state[relations.Pair{Follower: a, Followee: b}] = s
	return true
}

// apply runs op and returns whether anything changed, or the refusal.
func (m *model) apply(op rel.Op, actor, other string) (bool, error) {
	if actor == other {
		return false, rel.ErrSelf
	}
	mine, theirs := m.st(actor, other), m.st(other, actor)
	switch op {
	case rel.OpFollow:
		switch {
		case theirs == rel.StateBlocked:
			return false, rel.ErrBlocked
		case mine == rel.StateBlocked:
			return false, rel.ErrYouBlock
		case mine == rel.StateActive || mine == rel.StatePending:
			return false, nil
		case m.private[other]:
			return m.set(actor, other, rel.StatePending), nil
		}
		return m.set(actor, other, rel.StateActive), nil
	case rel.OpUnfollow:
		if mine == rel.StateActive || mine == rel.StatePending {
			return m.set(actor, other, rel.StateNone), nil
		}
		return false, nil
	case rel.OpApprove, rel.OpReject:
		if theirs != rel.StatePending {
			return false, rel.ErrNotPending
		}
		if op == rel.OpApprove {
			return m.set(other, actor, rel.StateActive), nil
		}
		return m.set(other, actor, rel.StateNone), nil
	case rel.OpBlock:
		changed := m.set(actor, other, rel.StateBlocked)
		if theirs == rel.StateActive || theirs == rel.StatePending {
			changed = m.set(other, actor, rel.StateNone) || changed
		}
		return changed, nil
	case rel.OpUnblock:
		if mine == rel.StateBlocked {
			return m.set(actor, other, rel.StateNone), nil
		}
		return false, nil
	}
	panic(op)
}

func (m *model) canRead(viewer string, p rel.Post) bool {
	switch {
	case viewer == p.Author:
		return true
	case p.Visibility == rel.Self:
		return false
	case m.st(viewer, p.Author) == rel.StateBlocked || m.st(p.Author, viewer) == rel.StateBlocked:
		return false
	case p.Visibility == rel.Public:
		return true
	}
	return m.st(viewer, p.Author) == rel.StateActive
}

var visibilities = []rel.Visibility{rel.Public, rel.Followers, rel.Self}

// TestRELPropertyRandomOperationsConvergeAndAgreeWithTheModel: seeded
// random sequences of the six operations across 20 users (a quarter of
// them private), with posts whose visibility changes, while the event
// stream is delivered to both views in shuffled, duplicated, randomly
// cut batches that keep re-sending old events. Every answer matches the
// model; at the end the views equal the truth table, the truth table
// equals the model, and AccessCheck — per post and set-based — agrees
// with the model for every viewer and post. FENCELAB_SOCIAL_SEED=<n>
// replays one sequence.
func TestRELPropertyRandomOperationsConvergeAndAgreeWithTheModel(t *testing.T) {
	t.Parallel()
	seeds := []uint64{uint64(time.Now().UnixNano()), 1, 2}
	if s := os.Getenv("FENCELAB_SOCIAL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runProperty(t, seed, 300)
		})
	}
}

func runProperty(t *testing.T, seed uint64, steps int) {
	defer func() {
		if t.Failed() {
			t.Logf("reproduce with FENCELAB_SOCIAL_SEED=%d", seed)
		}
	}()
	e := relations.StartLab(e2etest.X(t), e2etest.Options{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 40))
	m := &model{private: map[string]bool{}, state: map[relations.Pair]rel.State{}, posts: map[int64]rel.Post{}}
	users := make([]string, 20)
	for i := range users {
		users[i] = fmt.Sprintf("user-%04d", i)
		m.private[users[i]] = i%4 == 0
		_, err := e.Svc.SetProfile(ctx, users[i], m.private[users[i]])
		require.NoError(t, err)
	}
	for _, u := range users {
		for range 2 {
			p := e.Post(t, u, visibilities[rng.IntN(3)])
			m.posts[p.PostID] = p
		}
	}
	postIDs := make([]int64, 0, len(m.posts))
	for id := range m.posts {
		postIDs = append(postIDs, id)
	}
	sort.Slice(postIDs, func(i, j int) bool { return postIDs[i] < postIDs[j] })

	var (
		seen   []outbox.Event
		lastID int64
	)
	// deliverSome sends a random sample of every event seen so far —
	// old ones again included — shuffled, in random batches, to both views.
	deliverSome := func(all bool) {
		seen = append(seen, relations.RelEvents(t, e.Pool, lastID)...)
		if len(seen) > 0 {
			lastID = seen[len(seen)-1].ID
		}
		sample := seen
		if !all {
			sample = nil
			for _, ev := range seen {
				if rng.IntN(3) == 0 {
					sample = append(sample, ev)
				}
			}
		}
		for _, v := range rel.Views {
			relations.Deliver(t, e.Pool, v, relations.ShuffledWithDuplicates(rng, sample), func() int { return 1 + rng.IntN(30) })
		}
	}

	for step := range steps {
		if rng.IntN(10) == 0 {
			// A visibility change (the author, or someone else: refused).
			id := postIDs[rng.IntN(len(postIDs))]
			actor := m.posts[id].Author
			if rng.IntN(4) == 0 {
				actor = users[rng.IntN(len(users))]
			}
			v := visibilities[rng.IntN(3)]
			p, err := e.Svc.SetVisibility(ctx, actor, id, v)
			if actor != m.posts[id].Author {
				require.Error(t, err, "seed %d step %d: %s changed %s's post", seed, step, actor, m.posts[id].Author)
				continue
			}
			require.NoError(t, err, "seed %d step %d", seed, step)
			require.Equal(t, v, p.Visibility)
			mp := m.posts[id]
			mp.Visibility = v
			m.posts[id] = mp
			continue
		}
		op := rel.Ops[rng.IntN(len(rel.Ops))]
		actor, other := users[rng.IntN(len(users))], users[rng.IntN(len(users))]
		wantChanged, wantErr := m.apply(op, actor, other)
		res, err := e.Svc.Do(ctx, op, actor, other)
		if wantErr != nil {
			require.ErrorIs(t, err, wantErr, "seed %d step %d: %s %s %s", seed, step, op, actor, other)
		} else {
			require.NoError(t, err, "seed %d step %d: %s %s %s", seed, step, op, actor, other)
			require.Equal(t, wantChanged, res.Changed, "seed %d step %d: %s %s %s", seed, step, op, actor, other)
			require.Equal(t, m.st(res.Follower, res.Followee), res.State, "seed %d step %d: %s %s %s", seed, step, op, actor, other)
		}
		if step%25 == 24 {
			deliverSome(false)
			// Mid-stream: never ahead of the truth, never a block with a follow.
			e2etest.Assert(t, e.Pool, "REL-I1", "REL-I2", "REL-I3")
		}
	}
	deliverSome(true)

	tr := relations.Truth(t, e.Pool)
	for _, v := range rel.Views {
		require.Equal(t, relations.ExpectedView(tr, v), relations.ReadView(t, e.Pool, v), "seed %d: view %s", seed, v.Name)
	}
	for p, s := range m.state {
		require.Equal(t, s, tr[p].State, "seed %d: %s > %s", seed, p.Follower, p.Followee)
	}
	for p, r := range tr {
		require.Equal(t, m.st(p.Follower, p.Followee), r.State, "seed %d: %s > %s", seed, p.Follower, p.Followee)
	}

	viewers := append([]string{"user-outsider"}, users...)
	for _, viewer := range viewers {
		want := map[int64]bool{}
		for _, id := range postIDs {
			ok, err := rel.AccessCheck(ctx, e.Pool, viewer, id)
			require.NoError(t, err)
			require.Equal(t, m.canRead(viewer, m.posts[id]), ok, "seed %d: %s reads post %d of %s (%s)",
				seed, viewer, id, m.posts[id].Author, m.posts[id].Visibility)
			if ok {
				want[id] = true
			}
		}
		rows, err := e.Pool.Query(ctx, `SELECT post_id FROM social_readable_posts($1)`, viewer)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		got := map[int64]bool{}
		for _, id := range ids {
			got[id] = true
		}
		require.Equal(t, want, got, "seed %d: social_readable_posts(%s)", seed, viewer)
	}

	// The real consumers now replay the whole stream in order onto the
	// converged views: nothing changes, and every invariant holds.
	e.CatchUp(t)
	for _, v := range rel.Views {
		require.Equal(t, relations.ExpectedView(tr, v), relations.ReadView(t, e.Pool, v), "seed %d: view %s after replay", seed, v.Name)
	}
	e2etest.Assert(t, e.Pool, "social")
	if t.Failed() {
		return
	}
	var n int
	require.NoError(t, e.Pool.QueryRow(ctx, `SELECT count(*) FROM social_relation WHERE version > 0`).Scan(&n))
	require.Greater(t, n, 20, "seed %d: the sequence should touch many pairs", seed)
}
