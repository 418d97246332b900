// Package claim_test runs chapter 14's experiments against real PostgreSQL,
// real worker processes and a fake tool whose ledger is the ground truth.
package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/workflow"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// lab is one experiment's world: a fresh database and a fake tool.
type lab struct {
	url  string
	pool *pgxpool.Pool
	tool *fakeprovider.Server
}

func newLab(t *testing.T, caps fakeprovider.Capabilities) lab {
	t.Helper()
	url := pgtest.URL(t)
	tool, err := fakeprovider.Start(caps)
	require.NoError(t, err)
	t.Cleanup(tool.Close)
	return lab{url: url, pool: pgtest.Pool(t, url, 20), tool: tool}
}

// bookTool is the chapter's tool: accepts idempotency keys, answers queries.
var bookTool = fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true, Query: true}

// worker is a claim client under one owner name, running the workflow kind
// against the lab's tool.
func (l lab) worker(t *testing.T, owner string, kinds ...claim.Kind) *claim.Client {
	t.Helper()
	c := claim.NewClient(l.pool, claim.Options{Owner: owner})
	if len(kinds) == 0 {
		kinds = []claim.Kind{workflow.NewKind(l.tool.Client())}
	}
	require.NoError(t, c.Register(kinds...))
	return c
}

func (l lab) enqueue(t *testing.T, c *claim.Client, nj claim.NewJob) int64 {
	t.Helper()
	id, created, err := c.Enqueue(context.Background(), l.pool, nj)
	require.NoError(t, err)
	require.True(t, created)
	return id
}

type jobRow struct {
	State    claim.State
	Owner    string
	Fence    int64
	Attempts int
	LastErr  string
}

func (l lab) job(t *testing.T, id int64) jobRow {
	t.Helper()
	var r jobRow
	require.NoError(t, l.pool.QueryRow(context.Background(),
		`SELECT state, coalesce(owner, ''), fence, attempts, coalesce(last_error, '') FROM job WHERE id = $1`, id).
		Scan(&r.State, &r.Owner, &r.Fence, &r.Attempts, &r.LastErr))
	return r
}

// history is a job's events as "event:fence".
func (l lab) history(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := l.pool.Query(context.Background(), `SELECT event || ':' || fence FROM job_event WHERE job_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func (l lab) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, l.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// Two claimers race one ready workflow, many times over: each time exactly
// one claim event, one owner, one tool effect.
func TestTwoClaimersCannotOwnOneWorkflow(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	ctx := context.Background()
	a, b := l.worker(t, "claimer-a"), l.worker(t, "claimer-b")
	const rounds = 50
	for i := range rounds {
		key := fmt.Sprintf("wf-%04d", i)
		id := l.enqueue(t, a, claim.NewJob{Kind: workflow.KindName, BusinessKey: key})
		start := make(chan struct{})
		got := make([][]*claim.Job, 2)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for n, c := range []*claim.Client{a, b} {
			wg.Go(func() {
				<-start
				got[n], errs[n] = c.Claim(ctx, claim.ClaimParams{Kinds: []string{workflow.KindName}, Limit: 1})
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.Equal(t, 1, len(got[0])+len(got[1]), "round %d: exactly one claimer owns the job", i)
		winner, c := got[0], a
		if len(winner) == 0 {
			winner, c = got[1], b
		}
		require.Equal(t, c.Owner(), l.job(t, id).Owner)
		require.NoError(t, c.Execute(ctx, winner[0]))
		require.Equal(t, 1, l.count(t, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id))
		require.Len(t, l.tool.EffectsFor(workflow.IdempotencyKey(key)), 1)
	}
	require.Equal(t, rounds, l.count(t, `SELECT count(*) FROM job WHERE state = 'succeeded'`))
	require.Equal(t, rounds, l.tool.Posts())
	require.Len(t, l.tool.Effects(), rounds)
	e2etest.Assert(t, l.pool, "claim")
}

// The book's 14.3 timeline: the owner stalls after its claim; its lease is
// expired with SQL (an exact boundary, not a wait); recovery raises the fence
// and, the tool having side effects, makes the job unknown; the resolver asks
// the tool by the idempotency key, gets an authoritative empty answer and
// sends the job back to ready; a new owner claims it, calls the tool and
// commits. Then the stalled owner wakes, calls the tool (same key: the same
// effect) and tries to commit its result: refused.
func TestExpiredOwnerCannotCommitAnOldResult(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	ctx := context.Background()
	oldW, newW := l.worker(t, "worker-old"), l.worker(t, "worker-new")
	id := l.enqueue(t, oldW, claim.NewJob{Kind: workflow.KindName, BusinessKey: "wf-0042", Payload: workflow.Input{Input: "report"}})

	claimed, err := oldW.Claim(ctx, claim.ClaimParams{})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	stalled := claimed[0] // … the old owner stalls here, before its tool call.

	_, err = l.pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 millisecond' WHERE id = $1`, id)
	require.NoError(t, err)
	rec, err := newW.RecoverExpired(ctx, 100, time.Microsecond)
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Equal(t, claim.StateUnknown, rec[0].State)
	_, err = l.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id) // the resolver's turn, now
	require.NoError(t, err)
	res, err := newW.ResolveUnknown(ctx, 100, 2)
	require.NoError(t, err)
	require.Equal(t, []claim.Resolved{{ID: id, Kind: workflow.KindName, State: claim.StateReady}}, res,
		"the tool authoritatively has no effect for the key: claim again")

	again, err := newW.Claim(ctx, claim.ClaimParams{})
	require.NoError(t, err)
	require.Len(t, again, 1)
	current := again[0]
	require.NoError(t, newW.Execute(ctx, current))

	lateErr := oldW.Execute(ctx, stalled) // the old owner wakes up
	require.ErrorIs(t, lateErr, claim.ErrStaleFence)
	t.Logf("old fence %d, new fence %d; the old owner's late commit: %v", stalled.Fence, current.Fence, lateErr)
	fmt.Printf("{\"old_fence\":%d,\"new_fence\":%d,\"old_write\":\"refused\"}\n", stalled.Fence, current.Fence)
	require.Less(t, stalled.Fence, current.Fence)

	row := l.job(t, id)
	require.Equal(t, claim.StateSucceeded, row.State)
	require.Equal(t, current.Fence, row.Fence)
	require.Equal(t, "worker-new", row.Owner)
	require.Equal(t, []string{"claimed:1", "recovered:2", "resolving:3", "resolved_absent:3", "claimed:4", "succeeded:4", "rejected_stale:1"},
		l.history(t, id))
	require.Len(t, l.tool.EffectsFor(workflow.IdempotencyKey("wf-0042")), 1, "one tool effect for the business key")
	require.Equal(t, 2, l.tool.Requests(fakeprovider.OpCreate), "both owners called the tool; the key made it one effect")
	e2etest.Assert(t, l.pool, "claim")
}

// When the tool cannot be asked, an unknown job is neither failed nor run
// again: a human decides. The tool here committed the effect and dropped the
// response, so re-running would have made a second one.
func TestUnknownWithoutQueryGoesToReview(t *testing.T) {
	t.Parallel()
	l := newLab(t, fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true}) // no query
	ctx := context.Background()
	noResolve := workflow.NewKind(l.tool.Client())
	noResolve.Name, noResolve.Resolve = "workflow.blind", nil
	w := l.worker(t, "worker-1", workflow.NewKind(l.tool.Client()), noResolve)
	l.tool.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, DropResponse: true})

	for _, kind := range []string{workflow.KindName, "workflow.blind"} {
		id := l.enqueue(t, w, claim.NewJob{Kind: kind, BusinessKey: "wf-7-" + kind})
		jobs, err := w.Claim(ctx, claim.ClaimParams{Kinds: []string{kind}})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.NoError(t, w.Execute(ctx, jobs[0]))
		require.Equal(t, claim.StateUnknown, l.job(t, id).State, "no response: the outcome is unknown")

		_, err = l.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		res, err := w.ResolveUnknown(ctx, 10, 1)
		require.NoError(t, err)
		require.Equal(t, []claim.Resolved{{ID: id, Kind: kind, State: claim.StateNeedsReview}}, res)
		row := l.job(t, id)
		require.Equal(t, claim.StateNeedsReview, row.State)
		require.Equal(t, 1, row.Attempts, "never re-run")
		require.Equal(t, []string{"claimed:1", "unknown:1", "resolving:2", "needs_review:2"}, l.history(t, id))
		t.Logf("%s: %s", kind, row.LastErr)
	}
	for _, kind := range []string{workflow.KindName, "workflow.blind"} {
		require.Len(t, l.tool.EffectsFor(workflow.IdempotencyKey("wf-7-"+kind)), 1, "the effect happened once and was not repeated")
	}
	require.Equal(t, 1, l.tool.Requests(fakeprovider.OpQuery), "only the kind with a Resolve asked (and was refused)")
	e2etest.Assert(t, l.pool, "claim")
}

// A tool that keeps answering 503: each failed attempt pushes due_at out by
// an exponentially growing, jittered delay, the job is not claimable before
// it, and after max_attempts claims it fails for good.
func TestRetriesBackOffAndStopAtMaxAttempts(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	l.tool.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Status: 503})
	ctx := context.Background()
	w := l.worker(t, "worker-1")
	id := l.enqueue(t, w, claim.NewJob{Kind: workflow.KindName, BusinessKey: "wf-9", MaxAttempts: 3})

	for attempt := 1; attempt <= 3; attempt++ {
		jobs, err := w.Claim(ctx, claim.ClaimParams{})
		require.NoError(t, err)
		require.Len(t, jobs, 1, "attempt %d", attempt)
		require.Equal(t, attempt, jobs[0].Attempts)
		require.NoError(t, w.Execute(ctx, jobs[0]))
		if attempt == 3 {
			break
		}
		var wait time.Duration
		require.NoError(t, l.pool.QueryRow(ctx, `SELECT (due_at - updated_at) FROM job WHERE id = $1 AND state = 'ready'`, id).Scan(&wait))
		d := claim.BackoffBase << (attempt - 1)
		require.GreaterOrEqual(t, wait, d/2, "attempt %d backoff", attempt)
		require.LessOrEqual(t, wait, d, "attempt %d backoff", attempt)
		t.Logf("attempt %d failed; next try in %v", attempt, wait)
		none, err := w.Claim(ctx, claim.ClaimParams{})
		require.NoError(t, err)
		require.Empty(t, none, "not claimable before its due_at")
		_, err = l.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id) // jump to the boundary
		require.NoError(t, err)
	}
	row := l.job(t, id)
	require.Equal(t, claim.StateFailed, row.State)
	require.Equal(t, 3, row.Attempts)
	require.Contains(t, row.LastErr, "503")
	none, err := w.Claim(ctx, claim.ClaimParams{})
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, []string{"claimed:1", "retry_scheduled:1", "claimed:2", "retry_scheduled:2", "claimed:3", "failed:3"}, l.history(t, id))
	require.Equal(t, 3, l.tool.Requests(fakeprovider.OpCreate))
	require.Empty(t, l.tool.Effects())
	e2etest.Assert(t, l.pool, "claim")
}

// 1,000 jobs whose owner died: two recoverers sweep them in batches at the
// same time, and each job is recovered by exactly one of them, once.
func TestRecoverExpiredIsBatchedAndConcurrentSafe(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	ctx := context.Background()
	pure := claim.Kind{Name: "t.pure", Handle: func(context.Context, *claim.Job) error { return nil }}
	effect := claim.Kind{Name: "t.effect", SideEffects: true, Handle: func(context.Context, *claim.Job) error { return nil }}
	dead := l.worker(t, "worker-dead", pure, effect)
	const n, batch = 1000, 50
	jobs := make([]claim.NewJob, n)
	for i := range jobs {
		jobs[i] = claim.NewJob{Kind: []string{"t.pure", "t.effect"}[i%2], BusinessKey: fmt.Sprintf("job-%04d", i)}
	}
	created, err := dead.EnqueueMany(ctx, l.pool, jobs)
	require.NoError(t, err)
	require.Equal(t, n, created)
	claimed, err := dead.Claim(ctx, claim.ClaimParams{Limit: n})
	require.NoError(t, err)
	require.Len(t, claimed, n)
	_, err = l.pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 second'`) // the owner died
	require.NoError(t, err)

	recoverers := []*claim.Client{l.worker(t, "recoverer-1", pure, effect), l.worker(t, "recoverer-2", pure, effect)}
	got := make([][]claim.Recovered, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range recoverers {
		wg.Go(func() {
			<-start
			for {
				rec, err := r.RecoverExpired(ctx, batch, time.Second)
				if err == nil && len(rec) > batch {
					err = fmt.Errorf("recovered %d jobs in one batch of %d", len(rec), batch)
				}
				if err != nil {
					errs[i] = err // asserted on the test goroutine
					return
				}
				if len(rec) == 0 {
					return
				}
				got[i] = append(got[i], rec...)
			}
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	seen := map[int64]int{}
	for _, rec := range got {
		for _, x := range rec {
			seen[x.ID]++
			want := claim.StateReady
			if x.Kind == "t.effect" {
				want = claim.StateUnknown
			}
			require.Equal(t, want, x.State, "job %d", x.ID)
			require.Equal(t, int64(2), x.Fence)
		}
	}
	require.Len(t, seen, n)
	for id, times := range seen {
		require.Equal(t, 1, times, "job %d", id)
	}
	t.Logf("recoverer-1 took %d, recoverer-2 took %d", len(got[0]), len(got[1]))
	require.Equal(t, n, l.count(t, `SELECT count(*) FROM job_event WHERE event = 'recovered'`))
	require.Equal(t, 0, l.count(t, `SELECT count(*) FROM job WHERE state = 'running'`))
	require.Equal(t, n/2, l.count(t, `SELECT count(*) FROM job WHERE state = 'unknown' AND fence = 2`))
	require.Equal(t, n/2, l.count(t, `SELECT count(*) FROM job WHERE state = 'ready' AND fence = 2 AND owner IS NULL`))
	// The re-dispatch is spread, not one burst.
	require.Greater(t, l.count(t, `SELECT count(DISTINCT date_trunc('milliseconds', due_at)) FROM job`), 100)
	e2etest.Assert(t, l.pool, "claim")
}

// Two worker pools of four goroutines drain 10,000 jobs: every job succeeds
// exactly once, with one claim and one completion event.
func TestWorkerPoolDrainsTenThousandJobs(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	ctx := context.Background()
	var mu sync.Mutex
	runs := map[int64]int{}
	kind := claim.Kind{Name: "t.noop", Handle: func(_ context.Context, j *claim.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	}}
	a, b := l.worker(t, "pool-a", kind), l.worker(t, "pool-b", kind)
	const n = 10_000
	jobs := make([]claim.NewJob, n)
	for i := range jobs {
		jobs[i] = claim.NewJob{Kind: "t.noop", BusinessKey: fmt.Sprintf("job-%05d", i)}
	}
	created, err := a.EnqueueMany(ctx, l.pool, jobs)
	require.NoError(t, err)
	require.Equal(t, n, created)
	// What autovacuum does soon after a burst (see the job table's
	// storage parameters); without statistics the claim scan sorts.
	_, err = l.pool.Exec(ctx, `ANALYZE job`)
	require.NoError(t, err)

	begin := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*claim.Client{a, b} {
		wg.Go(func() { errs[i] = c.Work(ctx, claim.PoolOptions{Workers: 4, ExitWhenIdle: true}) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	elapsed := time.Since(begin)
	t.Logf("drained %d jobs with 2 pools × 4 workers in %v: %.0f jobs/s (test cluster, fsync off)", n, elapsed, n/elapsed.Seconds())

	require.Len(t, runs, n)
	for id, k := range runs {
		require.Equal(t, 1, k, "job %d ran %d times", id, k)
	}
	require.Equal(t, n, l.count(t, `SELECT count(*) FROM job WHERE state = 'succeeded' AND fence = 1 AND attempts = 1`))
	require.Equal(t, n, l.count(t, `SELECT count(*) FROM job_event WHERE event = 'claimed'`))
	require.Equal(t, n, l.count(t, `SELECT count(*) FROM job_event WHERE event = 'succeeded'`))
	require.Equal(t, 0, l.count(t, `SELECT count(*) FROM job_event WHERE event = 'rejected_stale'`))
	require.Positive(t, l.count(t, `SELECT count(*) FROM job WHERE owner = 'pool-a'`))
	require.Positive(t, l.count(t, `SELECT count(*) FROM job WHERE owner = 'pool-b'`))
	e2etest.Assert(t, l.pool, "claim")
}

// A heartbeat that finds the lease gone cancels the handler's context; the
// handler's late result is refused.
func TestLostHeartbeatCancelsTheHandler(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan int64, 1)
	stopped := make(chan error, 1)
	kind := claim.Kind{Name: "t.slow", Handle: func(ctx context.Context, j *claim.Job) error {
		started <- j.ID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return ctx.Err()
	}}
	w := l.worker(t, "worker-1", kind)
	id := l.enqueue(t, w, claim.NewJob{Kind: "t.slow", BusinessKey: "slow-1"})
	done := make(chan error, 1)
	go func() {
		done <- w.Work(ctx, claim.PoolOptions{Workers: 1, Lease: 300 * time.Millisecond, NoListen: true, PollInterval: 10 * time.Millisecond})
	}()
	require.Equal(t, id, <-started)
	// Another party takes the job over (as a recovery would): the fence moves.
	_, err := l.pool.Exec(context.Background(), `UPDATE job SET fence = fence + 1 WHERE id = $1`, id)
	require.NoError(t, err)
	cause := e2etest.WaitOrTimeout(t, stopped, "the handler was not cancelled")
	require.True(t, errors.Is(cause, claim.ErrStaleFence), "cause: %v", cause)
	cancel()
	require.NoError(t, <-done)
	h := l.history(t, id)
	require.Equal(t, []string{"claimed:1", "heartbeat_lost:1", "rejected_stale:1"}, h)
}
