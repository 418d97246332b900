package likes

// The kit the like counters chapter's experiments (and its e2e tests)
// drive the app with: liked items, counter runners, a like/unlike storm
// over HTTP with doubled clicks, a sampler of LIKE-I4, and the checks
// that compare the counts with the facts once the counter caught up.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/like"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Lab is one experiment's world: the app on a fresh database (or o.DBURL).
type Lab struct {
	*lab.App
	x *lab.X
}

// StartLab starts the app for an experiment.
func StartLab(x *lab.X, o lab.Options) *Lab {
	x.Helper()
	return &Lab{App: x.Start(o), x: x}
}

// LabInvariants are this module's checks. Tests name them rather than
// the whole "social" module, whose other views are not running here.
var LabInvariants = []string{"LIKE-I1", "LIKE-I2", "LIKE-I3", "LIKE-I4"}

const LabAuthor = "user-0042"

// Items publishes n PUBLIC posts by LabAuthor: the liked items.
func (l *Lab) Items(t lab.T, n int) []int64 {
	t.Helper()
	svc, err := rel.NewService(app.Standalone(l.Pool))
	require.NoError(t, err)
	ids := make([]int64, n)
	for i := range ids {
		p, err := svc.CreatePost(context.Background(), LabAuthor, rel.PostRequest{Body: fmt.Sprintf("item %d", i), Visibility: rel.Public})
		require.NoError(t, err)
		ids[i] = p.PostID
	}
	return ids
}

// Counter is a runner of the like counter on the app's pool and faults.
func (l *Lab) Counter(t lab.T, owner string) *outbox.Runner {
	t.Helper()
	svc, err := like.NewService(labenv.Deps(l.App), like.Config{})
	require.NoError(t, err)
	r, err := outbox.NewRunner(l.Pool, svc.Counter(), outbox.Options{Owner: owner, Faults: l.Faults})
	require.NoError(t, err)
	return r
}

// Running runs r until the returned stop is called.
func Running(t lab.T, r *outbox.Runner) (stop func()) {
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

// CatchUp applies every committed like event with a fresh runner.
func (l *Lab) CatchUp(t lab.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := l.Counter(t, "catch-up")
	_, err := r.CatchUp(ctx)
	require.NoError(t, err)
	// Give the lease back: Run on an ended context only releases it.
	done, cancelRun := context.WithCancel(ctx)
	cancelRun()
	require.NoError(t, r.Run(done))
	l.x.Step(lab.Step{Actor: "counter", Action: "catch up with every committed like event", Outcome: lab.Accepted,
		Note: fmt.Sprintf("%d events in the inbox", InboxRows(t, l.Pool))})
}

// Unapplied is the number of like events no count includes yet, over
// every item (social_like_unapplied, as the read path computes it).
func Unapplied(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `
		SELECT coalesce(sum(u.events), 0)::bigint
		  FROM (SELECT DISTINCT item_id FROM social_like) i CROSS JOIN LATERAL social_like_Unapplied(i.item_id) u`).Scan(&n)
	return n, err
}

// WaitCaughtUp waits for a counter running elsewhere (a task, another
// process) to have applied every committed like event.
func WaitCaughtUp(t lab.T, pool *pgxpool.Pool, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := Unapplied(context.Background(), pool)
		return err == nil && n == 0
	}, within, 20*time.Millisecond, "the counter did not catch up")
}

func InboxRows(t lab.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_inbox WHERE consumer = $1`, like.ConsumerName).Scan(&n))
	return n
}

// Sampler checks LIKE-I4 over and over until stopped: the bound must hold
// at every moment, not only at the end. Errors of the check itself (the
// database is down in LIKE-03) are counted, not failures.
type Sampler struct {
	Samples, Errs atomic.Int64
	Stop          func()
}

// StormOnTen is the storm experiments' setting: ten liked items, a storm
// of 50 users over them (not yet running) and the LIKE-I4 bound sampled
// from now on, so every moment of the storm is judged.
func (l *Lab) StormOnTen(t lab.T) ([]int64, *Storm, *Sampler) {
	t.Helper()
	ids := l.Items(t, 10)
	s := l.NewStorm(t, 50, ids)
	return ids, s, l.SampleBound(t)
}

func (l *Lab) SampleBound(t lab.T) *Sampler {
	t.Helper()
	s := &Sampler{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			res := l.x.Env.Invariants().Run(ctx, l.Pool, "LIKE-I4")
			switch {
			case len(res) != 1:
				t.Errorf("LIKE-I4 is not registered")
				return
			case res[0].Err != nil:
				s.Errs.Add(1)
				time.Sleep(20 * time.Millisecond) // the server is away; don't spin
			case !res[0].Holds():
				var sb strings.Builder
				invariant.Format(&sb, res[0])
				t.Errorf("LIKE-I4 broken during the storm (sample %d):\n%s", s.Samples.Load()+1, sb.String())
				s.Samples.Add(1)
			default:
				s.Samples.Add(1)
			}
		}
	}()
	var once sync.Once
	s.Stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(s.Stop)
	return s
}

// pair is one (item, user) fact.
type pair struct {
	item int64
	user string
}

// Storm is a like/unlike storm over HTTP: each user is one client that
// clicks like or unlike on random items, and a quarter of its clicks go
// out twice at once (a double click). It records, per fact, how many
// answers said "changed", the state the last click asked for, whether
// any click had no answer (its outcome is unknown) and whether the last
// one had none.
type Storm struct {
	a      *lab.App
	x      *lab.X
	users  []string
	tokens map[string]string
	items  []int64

	mu          sync.Mutex
	changed     map[pair]int64
	last        map[pair]bool
	unknown     map[pair]bool
	lastUnknown map[pair]bool

	OK, Failed atomic.Int64
	Clicks     atomic.Int64
}

func (l *Lab) NewStorm(t lab.T, nUsers int, items []int64) *Storm {
	t.Helper()
	s := &Storm{a: l.App, x: l.x, tokens: map[string]string{}, items: items,
		changed: map[pair]int64{}, last: map[pair]bool{}, unknown: map[pair]bool{}, lastUnknown: map[pair]bool{}}
	for i := range nUsers {
		u := fmt.Sprintf("user-%04d", 100+i)
		s.users = append(s.users, u)
		s.tokens[u] = l.Token(t, u, httpx.RoleUser)
	}
	return s
}

// Go runs the storm (Run) on a goroutine of its own; the returned channel
// is closed when it is over.
func (s *Storm) Go(t lab.T, seed uint64, clicksPerUser int) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); s.Run(t, seed, clicksPerUser) }()
	return done
}

// Run sends clicksPerUser clicks from every user, concurrently, and
// returns when all have been answered (or failed). It runs on goroutines:
// failures are reported with t.Errorf only, never FailNow.
func (s *Storm) Run(t lab.T, seed uint64, clicksPerUser int) {
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
	s.x.Step(lab.Step{Actor: fmt.Sprintf("%d clients", len(s.users)), Action: fmt.Sprintf("storm %d: %d clicks each, a quarter doubled", seed, clicksPerUser),
		Outcome: "answered", Note: fmt.Sprintf("%d clicks so far, %d failed", s.Clicks.Load(), s.Failed.Load())})
}

func (s *Storm) click(t lab.T, p pair, liked bool) {
	op := "unlike"
	if liked {
		op = "like"
	}
	s.Clicks.Add(1)
	resp, err := s.a.Send(context.Background(), lab.Req{Method: http.MethodPost,
		Path: fmt.Sprintf("/social/items/%d/%s", p.item, op), Token: s.tokens[p.user]})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || resp.Status != http.StatusOK {
		// No answer, or a 5xx while the database is away: the click may
		// or may not have committed.
		if err == nil && resp.Status < 500 {
			t.Errorf("%s %v: %d %s", op, p, resp.Status, resp.Body)
		}
		s.Failed.Add(1)
		s.unknown[p], s.lastUnknown[p] = true, true
		return
	}
	s.OK.Add(1)
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

// CheckFacts compares every fact with what the clients were told: every
// fact has one event per version; a fact whose clicks were all answered
// has one version per "changed" answer; a fact whose last click was
// answered is in the state that click asked for — an acknowledged click
// is durable (LIKE-I1/I2 seen from the outside). It returns how many
// facts had all their clicks answered.
func (s *Storm) CheckFacts(t lab.T, pool *pgxpool.Pool) int {
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

// CheckCounts reads every item's likes over HTTP once the counter has
// caught up: nothing pending, bound zero, count = liked facts.
func (l *Lab) CheckCounts(t lab.T, items []int64) (total int64) {
	t.Helper()
	tok := l.Token(t, "user-0999", httpx.RoleUser)
	for _, id := range items {
		resp := l.Do(t, lab.Req{Method: http.MethodGet, Path: fmt.Sprintf("/social/items/%d/likes", id), Token: tok})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		var got like.Likes
		resp.JSON(t, &got)
		var truth int64
		require.NoError(t, l.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM social_like WHERE item_id = $1 AND liked`, id).Scan(&truth))
		require.Equal(t, like.Likes{ItemID: id, Count: truth}, got, "item %d once caught up", id)
		total += truth
	}
	l.x.Step(lab.Step{Actor: "client", Action: fmt.Sprintf("read the likes of %d items", len(items)), Outcome: "exact",
		Note: fmt.Sprintf("%d likes, nothing pending, bound 0", total)})
	return total
}

// EventsOnce: every like event is in the counter's inbox exactly once
// (the primary key forbids twice; this shows none is missing).
func EventsOnce(t lab.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var events, missing int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (
		         SELECT 1 FROM outbox_inbox i WHERE i.consumer = $1 AND i.event_id = e.id))
		  FROM outbox_event e WHERE e.topic = 'social.like'`, like.ConsumerName).Scan(&events, &missing))
	require.Zero(t, missing, "events the counter never consumed")
	require.Equal(t, events, InboxRows(t, pool))
	return events
}

// StartWorker runs `fencelab worker --tasks outbox:social.likes`: the
// like counter alone, in its own OS process.
func (l *Lab) StartWorker(t lab.T, name string, args ...string) *lab.Proc {
	t.Helper()
	p := l.x.Spawn(name, l.x.Env.ChildEnv(l.DBURL),
		append([]string{"worker", "--tasks", "outbox:" + like.ConsumerName}, args...)...)
	l.x.Step(lab.Step{Actor: name, Action: "start `fencelab worker --tasks outbox:" + like.ConsumerName + "` " + strings.Join(args, " "), Outcome: "running",
		Note: fmt.Sprintf("pid %d", p.Pid())})
	return p
}

// ExpireLease ends a dead process's lease on the counter, as its expiry
// would (forced with SQL instead of waited for).
func ExpireLease(t lab.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(),
		`UPDATE outbox_consumer SET lease_until = now() WHERE name = $1 AND owner IS NOT NULL`, like.ConsumerName)
	require.NoError(t, err)
}

// WaitSessionsGone waits for the server to notice a killed worker's
// connections (and roll back what they had open).
func (l *Lab) WaitSessionsGone(t lab.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		_ = l.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'fencelab-worker'`).Scan(&n)
		return n == 0
	}, 30*time.Second, 5*time.Millisecond, "the killed worker's sessions end")
}

type Snapshot struct {
	Counts string
	Inbox  int64
}

func (l *Lab) CountsAndInbox(t lab.T) Snapshot {
	t.Helper()
	var s Snapshot
	require.NoError(t, l.Pool.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(item_id || '=' || n, ',' ORDER BY item_id), ''),
		       (SELECT count(*) FROM outbox_inbox WHERE consumer = $1)
		  FROM social_like_count`, like.ConsumerName).Scan(&s.Counts, &s.Inbox))
	return s
}

func (l *Lab) Recompute(t lab.T, token, query string) like.Recount {
	t.Helper()
	rc := RecountOf(t, l.Do(t, RecomputeReq(token, query)))
	l.x.Step(lab.Step{Actor: "admin", Action: "recompute" + query, Outcome: lab.Accepted,
		Note: fmt.Sprintf("%d items, %d chunks, %d corrected", rc.Items, rc.Chunks, rc.Drifted)})
	return rc
}

func RecomputeReq(token, query string) lab.Req {
	return lab.Req{Method: http.MethodPost, Path: "/social/admin/likes/recompute" + query, Token: token}
}

func RecountOf(t lab.T, resp lab.Response) like.Recount {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var rc like.Recount
	resp.JSON(t, &rc)
	return rc
}

// Figures sets the experiment's figure line (and logs it in a test).
func (l *Lab) Figures(m map[string]any) {
	for k, v := range m {
		l.x.Figure(k, v)
	}
}

// Kill9 kills a worker process with SIGKILL and waits until it is gone.
func (l *Lab) Kill9(t lab.T, p *lab.Proc) {
	t.Helper()
	require.NoError(t, p.Cmd.Process.Kill())
	go func() {
		for range p.Lines { // unblock the reader so the child is reaped
		}
	}()
	_ = p.Wait(t) // killed: its exit status is the signal
	l.x.Step(lab.Step{Actor: p.Name, Action: "SIGKILL", Outcome: "killed", Note: fmt.Sprintf("pid %d", p.Pid())})
}
