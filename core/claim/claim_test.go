package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// invariants are this package's own: the test needs no module list.
var invariants = invariant.MustRegistry(invariant.Core, claim.Invariants)

type bundle struct {
	pool *pgxpool.Pool
	c    *claim.Client
}

func setup(t *testing.T, kinds ...claim.Kind) bundle {
	t.Helper()
	pool := pgtest.New(t)
	c := claim.NewClient(pool, claim.Options{Owner: "test-a"})
	require.NoError(t, c.Register(kinds...))
	return bundle{pool: pool, c: c}
}

func noop(context.Context, *claim.Job) error { return nil }

func events(t *testing.T, db pg.Querier, id int64) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT event || ':' || fence FROM job_event WHERE job_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// keyedJobs is the job each registered business key names (job_key),
// in id order: a purge that deletes a job frees its key in the same
// statement, so after one these are exactly the jobs left.
func keyedJobs(t *testing.T, db pg.Querier) []int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT job_id FROM job_key ORDER BY job_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return out
}

func TestEnqueueIsIdempotentPerKindAndBusinessKey(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.noop", Handle: noop})
	ctx := context.Background()
	id1, created, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.noop", BusinessKey: "order-1", Payload: map[string]int{"n": 1}})
	require.NoError(t, err)
	require.True(t, created)
	id2, created, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.noop", BusinessKey: "order-1", Payload: map[string]int{"n": 2}})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, id1, id2)

	// Inside a caller's transaction: the job exists only if the tx commits.
	err = pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.c.Enqueue(ctx, tx, claim.NewJob{Kind: "t.noop", BusinessKey: "order-2"})
		require.NoError(t, err)
		return errors.New("business rule refused")
	})
	require.Error(t, err)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM job`).Scan(&n))
	require.Equal(t, 1, n)

	for _, bad := range []claim.NewJob{{Kind: "Bad Kind", BusinessKey: "x"}, {Kind: "t.noop"}, {Kind: "t.noop", BusinessKey: "x", MaxAttempts: -1}} {
		_, _, err := b.c.Enqueue(ctx, b.pool, bad)
		require.ErrorIs(t, err, claim.ErrInvalid)
	}
	invariants.Assert(t, b.pool, "claim")
}

func TestFencedWritesRefuseAStaleHolderAndRecordIt(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.noop", Handle: noop})
	ctx := context.Background()
	id, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.noop", BusinessKey: "k"})
	require.NoError(t, err)
	jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	old := jobs[0]
	require.Equal(t, int64(1), old.Fence)
	require.Equal(t, 1, old.Attempts)
	require.Equal(t, claim.StateRunning, old.State)

	_, err = b.pool.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
	require.ErrorIs(t, b.c.Heartbeat(ctx, old), claim.ErrStaleFence)
	rec, err := b.c.RecoverExpired(ctx, 10, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, []claim.Recovered{{ID: id, Kind: "t.noop", Fence: 2, State: claim.StateReady}}, rec)

	require.Eventually(t, func() bool {
		jobs, err = b.c.Claim(ctx, claim.ClaimParams{Owner: "test-b"})
		require.NoError(t, err)
		return len(jobs) == 1
	}, 5*time.Second, 5*time.Millisecond) // the recovery's jitter is at most 1ms
	cur := jobs[0]
	require.Equal(t, int64(3), cur.Fence)

	require.ErrorIs(t, b.c.Complete(ctx, old, "late"), claim.ErrStaleFence)
	require.ErrorIs(t, b.c.Fail(ctx, old, errors.New("late")), claim.ErrStaleFence)
	require.ErrorIs(t, b.c.MarkUnknown(ctx, old, errors.New("late")), claim.ErrStaleFence)
	err = pg.InTx(ctx, b.pool, func(tx pgx.Tx) error { return b.c.CompleteTx(ctx, tx, old, "late") })
	require.ErrorIs(t, err, claim.ErrStaleFence)
	require.NoError(t, b.c.Complete(ctx, cur, map[string]string{"by": "b"}))

	j, _, err := b.c.Get(ctx, id, 100)
	require.NoError(t, err)
	require.Equal(t, claim.StateSucceeded, j.State)
	require.Equal(t, int64(3), j.Fence)
	require.JSONEq(t, `{"by":"b"}`, string(j.Result))
	require.Equal(t, []string{"claimed:1", "heartbeat_lost:1", "recovered:2", "claimed:3",
		"rejected_stale:1", "rejected_stale:1", "rejected_stale:1", "rejected_stale:1", "succeeded:3"}, events(t, b.pool, id))
	invariants.Assert(t, b.pool, "claim")
}

func TestCompleteTxCommitsWithTheBusinessWriteOrNotAtAll(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.noop", Handle: noop})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `CREATE TABLE biz (k text PRIMARY KEY)`)
	require.NoError(t, err)
	for _, key := range []string{"a", "b"} {
		_, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.noop", BusinessKey: key})
		require.NoError(t, err)
	}
	jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	// a: the business write and the completion commit together.
	require.NoError(t, pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO biz VALUES ($1)`, jobs[0].BusinessKey); err != nil {
			return err
		}
		return b.c.CompleteTx(ctx, tx, jobs[0], nil)
	}))
	// b: the fence moved on, so the business write is rolled back with it.
	_, err = b.pool.Exec(ctx, `UPDATE job SET fence = fence + 1 WHERE id = $1`, jobs[1].ID)
	require.NoError(t, err)
	err = pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO biz VALUES ($1)`, jobs[1].BusinessKey); err != nil {
			return err
		}
		return b.c.CompleteTx(ctx, tx, jobs[1], nil)
	})
	require.ErrorIs(t, err, claim.ErrStaleFence)
	var keys []string
	rows, _ := b.pool.Query(ctx, `SELECT k FROM biz ORDER BY k`)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{jobs[0].BusinessKey}, keys)
	require.Equal(t, []string{"claimed:1", "rejected_stale:1"}, events(t, b.pool, jobs[1].ID),
		"the rejection is recorded although the caller's transaction rolled back")
}

func TestOnClaimHookCanCancelInsideTheClaimTransaction(t *testing.T) {
	t.Parallel()
	ran := make(chan int64, 4)
	b := setup(t, claim.Kind{
		Name: "t.hooked",
		OnClaim: func(ctx context.Context, tx pgx.Tx, j claim.Job) error {
			var on bool
			if err := tx.QueryRow(ctx, `SELECT $1::text <> 'muted'`, j.BusinessKey).Scan(&on); err != nil {
				return err
			}
			if !on {
				return claim.Cancel("preference off")
			}
			return nil
		},
		Handle: func(_ context.Context, j *claim.Job) error { ran <- j.ID; return nil },
	})
	ctx := context.Background()
	muted, _, _ := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.hooked", BusinessKey: "muted"})
	wanted, _, _ := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.hooked", BusinessKey: "wanted"})
	jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, wanted, jobs[0].ID)
	j, _, err := b.c.Get(ctx, muted, 10)
	require.NoError(t, err)
	require.Equal(t, claim.StateCancelled, j.State)
	require.Equal(t, []string{"claimed:1", "cancelled:1"}, events(t, b.pool, muted))
	invariants.Assert(t, b.pool, "claim")
}

// A claim's scan is written with a power of two for its LIMIT (5 jobs:
// a scan of up to 8) and its update takes the 5: the scan runs only as far
// as the update reads it, so it locks 5 rows and a claimer beside it finds
// the other 5 of 10, not 2. The first claim is held open inside its
// transaction by its OnClaim hook while the second runs.
func TestAClaimLocksOnlyTheJobsItTakes(t *testing.T) {
	t.Parallel()
	inside, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool // not a sync.Once: the second claim's hooks must not wait for the first's
	b := setup(t, claim.Kind{
		Name: "t.held",
		OnClaim: func(context.Context, pgx.Tx, claim.Job) error {
			if first.CompareAndSwap(false, true) {
				close(inside)
				<-release
			}
			return nil
		},
		Handle: noop,
	})
	ctx := context.Background()
	for i := range 10 {
		_, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.held", BusinessKey: fmt.Sprint("held-", i)})
		require.NoError(t, err)
	}
	// A failure below must not leave the first claim parked in its hook
	// (nor this test waiting on it): release it on every way out.
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	type result struct {
		jobs []*claim.Job
		err  error
	}
	held := make(chan result, 1)
	go func() {
		jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 5})
		held <- result{jobs, err}
	}()
	select {
	case <-inside: // the first claim's rows are locked, its transaction open
	case r := <-held:
		t.Fatalf("the first claim ended before its hook held it: %d jobs, %v", len(r.jobs), r.err)
	}
	beside, err := b.c.Claim(ctx, claim.ClaimParams{Owner: "test-b", Limit: 100})
	require.NoError(t, err)
	unblock()
	r := <-held
	require.NoError(t, r.err)
	firstJobs := r.jobs
	require.Len(t, firstJobs, 5)
	require.Len(t, beside, 5, "the second claimer finds every job the first did not take")
	ids := map[int64]bool{}
	for _, j := range append(firstJobs, beside...) {
		ids[j.ID] = true
	}
	require.Len(t, ids, 10)
	invariants.Assert(t, b.pool, "claim")
}

func TestPeriodicKindRunsOncePerSlotAcrossPools(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ran := make(chan string, 16)
	kind := claim.Kind{Name: "t.tick", Every: time.Hour, Handle: func(_ context.Context, j *claim.Job) error {
		slot, ok := j.Slot()
		if !ok {
			return errors.New("no slot")
		}
		ran <- slot.Format(time.RFC3339)
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for i := range 2 {
		c := claim.NewClient(pool, claim.Options{Owner: fmt.Sprintf("p%d", i)})
		require.NoError(t, c.Register(kind))
		go func() {
			_ = c.Work(ctx, claim.PoolOptions{Workers: 2, PollInterval: 20 * time.Millisecond})
			done <- struct{}{}
		}()
	}
	slot := <-ran
	require.Equal(t, time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339), slot)
	var n int
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM job_all WHERE kind = 't.tick' AND state = 'succeeded'`).Scan(&n))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	<-done
	require.Len(t, ran, 0, "the slot ran once although two pools scheduled it")
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM job_all`).Scan(&n))
	require.Equal(t, 1, n)
	invariants.Assert(t, pool, "claim")
}

// A job the resolver could not settle waits in needs_review until a person
// decides: succeeded, run again, or failed. Each decision is one conditional
// transition committed with the caller's transaction; a second decision on
// the same job finds it no longer in review.
func TestDecisionsSettleJobsInReview(t *testing.T) {
	t.Parallel()
	blind := claim.Kind{Name: "t.blind", SideEffects: true, Handle: func(context.Context, *claim.Job) error {
		return claim.Unknown(errors.New("no response"))
	}}
	b := setup(t, blind)
	ctx := context.Background()
	toReview := func(key string) int64 {
		t.Helper()
		id, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.blind", BusinessKey: key, MaxAttempts: 1})
		require.NoError(t, err)
		jobs, err := b.c.Claim(ctx, claim.ClaimParams{})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.NoError(t, b.c.Execute(ctx, jobs[0]))
		_, err = b.pool.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		res, err := b.c.ResolveUnknown(ctx, 10, 1)
		require.NoError(t, err)
		require.Equal(t, []claim.Resolved{{ID: id, Kind: "t.blind", State: claim.StateNeedsReview}}, res)
		return id
	}
	decide := func(id int64, d claim.Decision) (*claim.Job, error) {
		var j *claim.Job
		err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			j, err = b.c.DecideTx(ctx, tx, id, d, "admin-0001", "checked the channel's console", map[string]string{"by": "admin-0001"})
			return err
		})
		return j, err
	}

	delivered, retried, failed := toReview("n-1"), toReview("n-2"), toReview("n-3")
	j, err := decide(delivered, claim.DecideSucceeded)
	require.NoError(t, err)
	require.Equal(t, claim.StateSucceeded, j.State)
	require.JSONEq(t, `{"by":"admin-0001"}`, string(j.Result))
	_, err = decide(delivered, claim.DecideRetry)
	require.ErrorIs(t, err, claim.ErrNotInReview, "decided once")

	j, err = decide(retried, claim.DecideRetry)
	require.NoError(t, err)
	require.Equal(t, claim.StateReady, j.State)
	require.Equal(t, 2, j.MaxAttempts, "one more attempt granted beyond the spent budget")
	again, err := b.c.Claim(ctx, claim.ClaimParams{})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, retried, again[0].ID)
	require.Equal(t, int64(3), again[0].Fence, "the next claim raises the fence")

	j, err = decide(failed, claim.DecideFailed)
	require.NoError(t, err)
	require.Equal(t, claim.StateFailed, j.State)
	require.Equal(t, "checked the channel's console", j.LastError)

	require.Equal(t, []string{"claimed:1", "unknown:1", "resolving:2", "needs_review:2", "resolved_found:2"}, events(t, b.pool, delivered))
	require.Equal(t, []string{"claimed:1", "unknown:1", "resolving:2", "needs_review:2", "resolved_absent:2", "claimed:3"}, events(t, b.pool, retried))
	require.Equal(t, []string{"claimed:1", "unknown:1", "resolving:2", "needs_review:2", "failed:2"}, events(t, b.pool, failed))
	var owner string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT owner FROM job_event WHERE job_id = $1 AND event = 'resolved_found'`, delivered).Scan(&owner))
	require.Equal(t, "review:admin-0001", owner)
	_, err = decide(retried, claim.Decision("maybe"))
	require.ErrorIs(t, err, claim.ErrInvalid)
	invariants.Assert(t, b.pool, "claim")
}

// Finished jobs past the retention are purged with their history; a job
// still running, a recent one, one waiting for review and every job of a
// kind registered with KeepFinished stay. This is the batched purge of
// job_history's default partition (a finish on a day that had no
// partition); TestRetentionDropsAnExpiredDayWhole is the days'.
func TestPurgeFinishedDropsOnlyOldFinishedJobsOfUnkeptKinds(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.tick", Every: time.Minute, Handle: noop}, claim.Kind{Name: "t.work", Handle: noop},
		claim.Kind{Name: "t.kept", Handle: noop, KeepFinished: true})
	ctx := context.Background()
	enq := func(kind, key string) int64 {
		id, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: kind, BusinessKey: key})
		require.NoError(t, err)
		return id
	}
	oldSlot, newSlot, running := enq("t.tick", "every:1000"), enq("t.tick", "every:2000"), enq("t.tick", "every:3000")
	oldWork, failed, kept := enq("t.work", "order-1"), enq("t.work", "order-2"), enq("t.kept", "file-1")
	jobs, err := b.c.Claim(ctx, claim.ClaimParams{Owner: "test-a", Kinds: []string{"t.tick", "t.work", "t.kept"}, Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 6)
	for _, j := range jobs {
		switch j.ID {
		case running:
		case failed:
			require.NoError(t, b.c.Fail(ctx, j, claim.Permanent(errors.New("no"))))
		default:
			require.NoError(t, b.c.Complete(ctx, j, nil))
		}
	}
	// Age every finished job but newSlot past the retention (an exact
	// boundary, not a sleep): two days ago has no day partition (they are
	// created from today on), so the rows move to the default one.
	_, err = b.pool.Exec(ctx, `UPDATE job_history SET updated_at = now() - interval '2 days' WHERE id <> $1`, newSlot)
	require.NoError(t, err)

	n, err := b.c.PurgeFinished(ctx, 24*time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "one batch of two")
	n, err = b.c.PurgeFinished(ctx, 24*time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rows, err := b.pool.Query(ctx, `SELECT id FROM job_all ORDER BY id`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{newSlot, running, kept}, left)
	require.Equal(t, left, keyedJobs(t, b.pool), "a purged job's key went with it")
	for _, id := range []int64{oldSlot, oldWork, failed} {
		require.Empty(t, events(t, b.pool, id), "a purged job's history went with it")
	}
	require.NotEmpty(t, events(t, b.pool, kept))
	invariants.Assert(t, b.pool, "claim")
}

// The queue collector reports its own health: fencelab_collector_up is 1
// while its queries succeed and 0 (with a log line) once they fail — a
// failed scrape never looks like an empty queue.
func TestQueueCollectorFailureIsVisibleAsCollectorUpZero(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	reg := prometheus.NewRegistry()
	c := claim.NewClient(pool, claim.Options{Owner: "test-a", Metrics: reg})
	require.NoError(t, c.Register(claim.Kind{Name: "t.work", Handle: noop}))
	_, _, err := c.Enqueue(context.Background(), pool, claim.NewJob{Kind: "t.work", BusinessKey: "one"})
	require.NoError(t, err)
	up := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "fencelab_collector_up" {
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "collector" && l.GetValue() == "claim_queue" {
							return m.GetGauge().GetValue()
						}
					}
				}
			}
		}
		t.Fatal("no fencelab_collector_up{collector=\"claim_queue\"}")
		return -1
	}
	require.Equal(t, 1.0, up())
	pool.Close()
	require.Equal(t, 0.0, up(), "a closed pool fails the scrape's queries")
}

// A finished job leaves the live table in the statement that finishes it:
// it is in job_history, not in job, and job_all shows it once. A retry
// stays live. The claims' table holds only the live queue (migration 0614).
func TestAFinishedJobMovesToHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.work", Handle: noop, MaxAttempts: 3})
	ctx := context.Background()
	done, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: "done"})
	require.NoError(t, err)
	gaveUp, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: "gave-up"})
	require.NoError(t, err)
	retry, _, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: "retry"})
	require.NoError(t, err)
	jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for _, j := range jobs {
		switch j.ID {
		case done:
			require.NoError(t, b.c.Complete(ctx, j, map[string]string{"ok": "yes"}))
		case gaveUp:
			require.NoError(t, b.c.Fail(ctx, j, claim.Permanent(errors.New("no"))))
		case retry:
			require.NoError(t, b.c.Fail(ctx, j, errors.New("later")))
		}
	}
	where := func(id int64) (live, history, all int) {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job WHERE id = $1),
		    (SELECT count(*) FROM job_history WHERE id = $1), (SELECT count(*) FROM job_all WHERE id = $1)`, id).
			Scan(&live, &history, &all))
		return
	}
	for _, id := range []int64{done, gaveUp} {
		live, history, all := where(id)
		require.Equal(t, [3]int{0, 1, 1}, [3]int{live, history, all}, "job %d: finished, so in history only", id)
	}
	live, history, all := where(retry)
	require.Equal(t, [3]int{1, 0, 1}, [3]int{live, history, all}, "a retry stays live")

	j, evs, err := b.c.Get(ctx, done, 10)
	require.NoError(t, err)
	require.Equal(t, claim.StateSucceeded, j.State)
	require.JSONEq(t, `{"ok":"yes"}`, string(j.Result))
	require.Equal(t, "test-a", j.Owner)
	require.Len(t, evs, 2)
	j, _, err = b.c.Get(ctx, gaveUp, 10)
	require.NoError(t, err)
	require.Equal(t, claim.StateFailed, j.State)
	require.Contains(t, j.LastError, "no")
	invariants.Assert(t, b.pool, "claim")
}

// (kind, business_key) stays unique across the live table and the history:
// enqueueing a finished job's key returns that job, unchanged, as when
// finished jobs stayed in job; a bulk enqueue skips it, and of a key given
// twice in one bulk takes the first; a second registration of a key is
// refused by job_key's primary key (migration 0615). And the window the
// key's own table closes: while the completion that moves the key's job to
// the history is uncommitted, an enqueue of the key neither waits on the
// job's row nor inserts a second job — it returns the job at once.
func TestABusinessKeyStaysUniqueAcrossLiveAndHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.work", Handle: noop})
	ctx := context.Background()
	finish := func(key string, tx pgx.Tx) int64 {
		id, created, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: key})
		require.NoError(t, err)
		require.True(t, created)
		jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 1})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, id, jobs[0].ID)
		if tx == nil {
			require.NoError(t, b.c.Complete(ctx, jobs[0], nil))
		} else {
			require.NoError(t, b.c.CompleteTx(ctx, tx, jobs[0], nil))
		}
		return id
	}
	id := finish("order-1", nil)
	again, created, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: "order-1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, id, again)
	n, err := b.c.EnqueueMany(ctx, b.pool, []claim.NewJob{
		{Kind: "t.work", BusinessKey: "order-1"},
		{Kind: "t.work", BusinessKey: "order-2", Payload: map[string]int{"n": 1}},
		{Kind: "t.work", BusinessKey: "order-2", Payload: map[string]int{"n": 2}},
	})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the finished key is skipped, the new one inserted once")
	var payload string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT payload::text FROM job WHERE business_key = 'order-2'`).Scan(&payload))
	require.JSONEq(t, `{"n": 1}`, payload, "of a key given twice, the first is taken")
	_, err = b.pool.Exec(ctx, `INSERT INTO job_key (kind, business_key, job_id) VALUES ('t.work', 'order-1', 0)`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)
	_, err = b.pool.Exec(ctx, `WITH k AS (DELETE FROM job_key WHERE business_key = 'order-2') DELETE FROM job WHERE business_key = 'order-2'`)
	require.NoError(t, err)

	// The window, held open: the completion of order-3 holds its moved row
	// uncommitted while order-3 is enqueued again.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	id3 := finish("order-3", tx)
	// Bounded, so that an enqueue that waited on the job's row fails here
	// instead of hanging on the transaction this goroutine holds open.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	again, created, err = b.c.Enqueue(waitCtx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: "order-3"})
	require.NoError(t, err, "the enqueue returns without waiting for the completing transaction")
	require.False(t, created)
	require.Equal(t, id3, again)
	require.NoError(t, tx.Commit(ctx))
	var keys int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM job_all WHERE kind = 't.work' AND business_key = 'order-3'`).Scan(&keys))
	require.Equal(t, 1, keys)
	invariants.Assert(t, b.pool, "claim")
}

// Retention drops an expired day of history whole: the day partition goes
// from the catalog with its jobs' events, except the jobs of KeepFinished
// kinds, which move to job_history_kept first; today's day stays.
func TestRetentionDropsAnExpiredDayWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Kind{Name: "t.work", Handle: noop}, claim.Kind{Name: "t.kept", Handle: noop, KeepFinished: true})
	ctx := context.Background()
	created, err := b.c.EnsureHistoryDays(ctx, -3, -3)
	require.NoError(t, err)
	require.Len(t, created, 1)
	old := created[0]
	var ids []int64
	for _, nj := range []claim.NewJob{{Kind: "t.work", BusinessKey: "old"}, {Kind: "t.kept", BusinessKey: "old"}, {Kind: "t.work", BusinessKey: "new"}} {
		id, _, err := b.c.Enqueue(ctx, b.pool, nj)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	jobs, err := b.c.Claim(ctx, claim.ClaimParams{Limit: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for _, j := range jobs {
		require.NoError(t, b.c.Complete(ctx, j, nil))
	}
	// Three days ago: the partition created above (an exact boundary, not a sleep).
	_, err = b.pool.Exec(ctx, `UPDATE job_history SET updated_at = now() - interval '3 days' WHERE id = ANY ($1)`, ids[:2])
	require.NoError(t, err)
	var inOld int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+old).Scan(&inOld))
	require.Equal(t, 2, inOld)

	dropped, n, err := b.c.PurgeDays(ctx, 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{old}, dropped, "only the expired day")
	require.Equal(t, int64(1), n, "the kept kind's job moved out first")
	var exists bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, old).Scan(&exists))
	require.False(t, exists, "the partition is gone")
	var left []int64
	rows, err := b.pool.Query(ctx, `SELECT id FROM job_all ORDER BY id`)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1], ids[2]}, left)
	require.Equal(t, left, keyedJobs(t, b.pool), "a dropped job's key went with it")
	again, fresh, err := b.c.Enqueue(ctx, b.pool, claim.NewJob{Kind: "t.work", BusinessKey: "old"})
	require.NoError(t, err)
	require.True(t, fresh, "the key is free again once its job's history is gone")
	require.NotEqual(t, ids[0], again)
	var kept bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT kept FROM job_history WHERE id = $1`, ids[1]).Scan(&kept))
	require.True(t, kept)
	require.Empty(t, events(t, b.pool, ids[0]), "a dropped job's events went with it")
	require.NotEmpty(t, events(t, b.pool, ids[1]))
	st, err := b.c.MaintainHistory(ctx, 24*time.Hour)
	require.NoError(t, err)
	require.Empty(t, st.DaysDropped, "nothing else expired")
	invariants.Assert(t, b.pool, "claim")
}
