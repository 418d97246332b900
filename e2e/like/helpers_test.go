package like_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/like"
	"github.com/fencelab/fencelab/services/social/rel"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// likeInvariants are this module's checks. Tests name them rather than
// the whole "social" module, whose other views are not running here.
var likeInvariants = []string{"LIKE-I1", "LIKE-I2", "LIKE-I3", "LIKE-I4"}

const author = "user-0042"

// items publishes n PUBLIC posts by author: the liked items.
func items(t *testing.T, a *e2etest.App, n int) []int64 {
	t.Helper()
	svc := rel.NewService(a.Pool, nil, nil)
	ids := make([]int64, n)
	for i := range ids {
		p, err := svc.CreatePost(context.Background(), author, rel.PostRequest{Body: fmt.Sprintf("item %d", i), Visibility: rel.Public})
		require.NoError(t, err)
		ids[i] = p.PostID
	}
	return ids
}

// counter is a runner of the like counter on the app's pool and faults.
func counter(t *testing.T, a *e2etest.App, owner string) *outbox.Runner {
	t.Helper()
	svc := like.NewService(a.Pool, a.Faults, nil, 0)
	r, err := outbox.NewRunner(a.Pool, svc.Counter(), outbox.Options{Owner: owner, Faults: a.Faults})
	require.NoError(t, err)
	return r
}

// running runs r until the returned stop is called.
func running(t *testing.T, r *outbox.Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// catchUp applies every committed like event with a fresh runner.
func catchUp(t *testing.T, a *e2etest.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := counter(t, a, "catch-up")
	_, err := r.CatchUp(ctx)
	require.NoError(t, err)
	// Give the lease back: Run on an ended context only releases it.
	done, cancelRun := context.WithCancel(ctx)
	cancelRun()
	require.NoError(t, r.Run(done))
}

// unapplied is the number of like events no count includes yet, over
// every item (social_like_unapplied, as the read path computes it).
func unapplied(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `
		SELECT coalesce(sum(u.events), 0)::bigint
		  FROM (SELECT DISTINCT item_id FROM social_like) i CROSS JOIN LATERAL social_like_unapplied(i.item_id) u`).Scan(&n)
	return n, err
}

// waitCaughtUp waits for a counter running elsewhere (a task, another
// process) to have applied every committed like event.
func waitCaughtUp(t *testing.T, pool *pgxpool.Pool, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := unapplied(context.Background(), pool)
		return err == nil && n == 0
	}, within, 20*time.Millisecond, "the counter did not catch up")
}

func inboxRows(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_inbox WHERE consumer = $1`, like.ConsumerName).Scan(&n))
	return n
}

// sampler checks LIKE-I4 over and over until stopped: the bound must hold
// at every moment, not only at the end. Errors of the check itself (the
// database is down in LIKE-03) are counted, not failures.
type sampler struct {
	samples, errs atomic.Int64
	stop          func()
}

func sampleBound(t *testing.T, pool *pgxpool.Pool) *sampler {
	t.Helper()
	s := &sampler{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			res := e2etest.Invariants().Run(ctx, pool, "LIKE-I4")
			switch {
			case len(res) != 1:
				t.Errorf("LIKE-I4 is not registered")
				return
			case res[0].Err != nil:
				s.errs.Add(1)
				time.Sleep(20 * time.Millisecond) // the server is away; don't spin
			case !res[0].Holds():
				var sb strings.Builder
				invariant.Format(&sb, res[0])
				t.Errorf("LIKE-I4 broken during the storm (sample %d):\n%s", s.samples.Load()+1, sb.String())
				s.samples.Add(1)
			default:
				s.samples.Add(1)
			}
		}
	}()
	var once sync.Once
	s.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(s.stop)
	return s
}

// pair is one (item, user) fact.
type pair struct {
	item int64
	user string
}

// storm is a like/unlike storm over HTTP: each user is one client that
// clicks like or unlike on random items, and a quarter of its clicks go
// out twice at once (a double click). It records, per fact, how many
// answers said "changed", the state the last click asked for, whether
// any click had no answer (its outcome is unknown) and whether the last
// one had none.
type storm struct {
	a      *e2etest.App
	users  []string
	tokens map[string]string
	items  []int64

	mu          sync.Mutex
	changed     map[pair]int64
	last        map[pair]bool
	unknown     map[pair]bool
	lastUnknown map[pair]bool

	ok, failed atomic.Int64
	clicks     atomic.Int64
}

func newStorm(t *testing.T, a *e2etest.App, nUsers int, items []int64) *storm {
	t.Helper()
	s := &storm{a: a, tokens: map[string]string{}, items: items,
		changed: map[pair]int64{}, last: map[pair]bool{}, unknown: map[pair]bool{}, lastUnknown: map[pair]bool{}}
	for i := range nUsers {
		u := fmt.Sprintf("user-%04d", 100+i)
		s.users = append(s.users, u)
		s.tokens[u] = a.Token(t, u, httpx.RoleUser)
	}
	return s
}

// run sends clicksPerUser clicks from every user, concurrently, and
// returns when all have been answered (or failed). It runs on goroutines:
// failures are reported with t.Errorf only, never FailNow.
func (s *storm) run(t *testing.T, seed uint64, clicksPerUser int) {
	t.Helper()
	var wg sync.WaitGroup
	for ui, u := range s.users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(ui)))
			for range clicksPerUser {
				p := pair{item: s.items[rng.IntN(len(s.items))], user: u}
				liked := rng.IntN(100) < 60
				copies := 1
				if rng.IntN(4) == 0 {
					copies = 2
				}
				var cw sync.WaitGroup
				for range copies {
					cw.Add(1)
					go func() { defer cw.Done(); s.click(t, p, liked) }()
				}
				cw.Wait()
			}
		}()
	}
	wg.Wait()
}

func (s *storm) click(t *testing.T, p pair, liked bool) {
	op := "unlike"
	if liked {
		op = "like"
	}
	s.clicks.Add(1)
	resp, err := s.a.Send(context.Background(), e2etest.Req{Method: http.MethodPost,
		Path: fmt.Sprintf("/social/items/%d/%s", p.item, op), Token: s.tokens[p.user]})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || resp.Status != http.StatusOK {
		// No answer, or a 5xx while the database is away: the click may
		// or may not have committed.
		if err == nil && resp.Status < 500 {
			t.Errorf("%s %v: %d %s", op, p, resp.Status, resp.Body)
		}
		s.failed.Add(1)
		s.unknown[p], s.lastUnknown[p] = true, true
		return
	}
	s.ok.Add(1)
	var f like.Fact
	if err := json.Unmarshal(resp.Body, &f); err != nil { // on a click goroutine: report, never FailNow
		t.Errorf("%s %v: body %s: %v", op, p, resp.Body, err)
		return
	}
	if f.Liked != liked || f.ItemID != p.item || f.UserID != p.user {
		t.Errorf("%s %v answered %+v", op, p, f)
	}
	if f.Changed {
		s.changed[p]++
	}
	s.last[p], s.lastUnknown[p] = liked, false
}

// checkFacts compares every fact with what the clients were told: every
// fact has one event per version; a fact whose clicks were all answered
// has one version per "changed" answer; a fact whose last click was
// answered is in the state that click asked for — an acknowledged click
// is durable (LIKE-I1/I2 seen from the outside). It returns how many
// facts had all their clicks answered.
func (s *storm) checkFacts(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT f.item_id, f.user_id, f.liked, f.version,
		       (SELECT count(*) FROM outbox_event e
		         WHERE e.topic = 'social.like' AND e.key = f.item_id::text AND e.payload->>'user_id' = f.user_id)
		  FROM social_like f`)
	require.NoError(t, err)
	defer rows.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, checked := map[pair]bool{}, 0
	for rows.Next() {
		var (
			p       pair
			liked   bool
			version int64
			events  int64
		)
		require.NoError(t, rows.Scan(&p.item, &p.user, &liked, &version, &events))
		seen[p] = true
		require.Equal(t, version, events, "%v: one event per version", p)
		if _, ours := s.tokens[p.user]; !ours {
			continue // a click the test made itself
		}
		if !s.lastUnknown[p] {
			require.Equal(t, s.last[p], liked, "%v: the state of the last click", p)
		}
		if !s.unknown[p] {
			checked++
			require.Equal(t, s.changed[p], version, "%v: one version per answered change", p)
		}
	}
	require.NoError(t, rows.Err())
	for p, n := range s.changed {
		require.True(t, seen[p] || s.unknown[p], "%v: %d answered changes but no fact", p, n)
	}
	return checked
}

// checkCounts reads every item's likes over HTTP once the counter has
// caught up: nothing pending, bound zero, count = liked facts.
func checkCounts(t *testing.T, a *e2etest.App, items []int64) (total int64) {
	t.Helper()
	tok := a.Token(t, "user-0999", httpx.RoleUser)
	for _, id := range items {
		resp := a.Do(t, e2etest.Req{Method: http.MethodGet, Path: fmt.Sprintf("/social/items/%d/likes", id), Token: tok})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		var l like.Likes
		resp.JSON(t, &l)
		var truth int64
		require.NoError(t, a.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM social_like WHERE item_id = $1 AND liked`, id).Scan(&truth))
		require.Equal(t, like.Likes{ItemID: id, Count: truth}, l, "item %d once caught up", id)
		total += truth
	}
	return total
}

// eventsOnce: every like event is in the counter's inbox exactly once
// (the primary key forbids twice; this shows none is missing).
func eventsOnce(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var events, missing int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (
		         SELECT 1 FROM outbox_inbox i WHERE i.consumer = $1 AND i.event_id = e.id))
		  FROM outbox_event e WHERE e.topic = 'social.like'`, like.ConsumerName).Scan(&events, &missing))
	require.Zero(t, missing, "events the counter never consumed")
	require.Equal(t, events, inboxRows(t, pool))
	return events
}

// startWorker runs `fencelab worker --tasks outbox:social.likes`: the
// like counter alone, in its own OS process.
func startWorker(t *testing.T, dbURL string, args ...string) *e2etest.Child {
	t.Helper()
	return e2etest.StartChild(t, "worker", e2etest.ChildEnv(dbURL),
		append([]string{"worker", "--tasks", "outbox:" + like.ConsumerName}, args...)...)
}

// expireLease ends a dead process's lease on the counter, as its expiry
// would (forced with SQL instead of waited for).
func expireLease(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(),
		`UPDATE outbox_consumer SET lease_until = now() WHERE name = $1 AND owner IS NOT NULL`, like.ConsumerName)
	require.NoError(t, err)
}
