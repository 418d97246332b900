package outbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/core/promx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// invariants are this package's own: the test needs no module list.
var invariants = invariant.MustRegistry(invariant.Core, outbox.Invariants)

// The tests of this package are deliberately not parallel. Each owns its
// database, but not the horizon: pg_snapshot_xmin is the oldest open
// transaction of the whole server, so another test's open transaction
// moves the boundaries of this test's batches. These tests assert exact
// batch boundaries (what one RunOnce applies), so they run alone; module
// tests that only need "eventually everything" use Runner.CatchUp and run
// in parallel.

// seen is the tests' effect table: one row per handler application, no
// unique key, so a second effect would show as a second row.
const seenSchema = `
CREATE TABLE seen (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text   NOT NULL,
    event_id bigint NOT NULL,
    key      text   NOT NULL,
    fence    bigint NOT NULL
)`

type bundle struct {
	pool    *pgxpool.Pool
	faults  *faults.Set
	metrics *prometheus.Registry // the test's own: its runners count here only
	calls   atomic.Int64         // handler invocations, across runners
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.New(t)
	_, err := pool.Exec(context.Background(), seenSchema)
	require.NoError(t, err)
	return &bundle{pool: pool, faults: faults.New(), metrics: prometheus.NewRegistry()}
}

const topic = "test.things"

// consumer applies each event by inserting a row into seen.
func (b *bundle) consumer(name string) outbox.Consumer {
	return outbox.Consumer{
		Name:   name,
		Topics: []string{topic},
		Handle: func(ctx context.Context, tx pgx.Tx, ev outbox.Event) error {
			b.calls.Add(1)
			_, err := tx.Exec(ctx, `INSERT INTO seen (consumer, event_id, key, fence) VALUES ($1, $2, $3, $4)`,
				name, ev.ID, ev.Key, outbox.LeaseOf(ctx).Fence)
			return err
		},
	}
}

func (b *bundle) runner(t *testing.T, c outbox.Consumer, owner string) *outbox.Runner {
	t.Helper()
	r, err := outbox.NewRunner(b.pool, c, outbox.Options{Owner: owner, Faults: b.faults, Metrics: b.metrics})
	require.NoError(t, err)
	return r
}

// appendCommitted appends n events, each in its own committed transaction.
func (b *bundle) appendCommitted(t *testing.T, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := range n {
		require.NoError(t, pg.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
			id, err := outbox.Append(context.Background(), tx, topic, "k", map[string]int{"i": i})
			ids = append(ids, id)
			return err
		}))
	}
	return ids
}

// drainAll catches r up and checks it applied exactly want events.
func drainAll(t *testing.T, r *outbox.Runner, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := r.CatchUp(ctx)
	require.NoError(t, err)
	require.Equal(t, want, n)
}

// seenOrder returns the applied event ids in application order, and fails
// the test if any event was applied twice.
func (b *bundle) seenOrder(t *testing.T, consumer string) []int64 {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT event_id FROM seen WHERE consumer = $1 ORDER BY seq`, consumer)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	once := map[int64]bool{}
	for _, id := range ids {
		require.False(t, once[id], "event %d applied twice", id)
		once[id] = true
	}
	return ids
}

func (b *bundle) position(t *testing.T, consumer string) outbox.Position {
	t.Helper()
	var p outbox.Position
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT position_tx, position_id FROM outbox_consumer WHERE name = $1`, consumer).Scan(&p.TxID, &p.ID))
	return p
}

// The spec's gap test: transaction 1 appends id N and stays open,
// transaction 2 appends N+1 and commits, the consumer runs, then 1 commits.
// A consumer that trusted "id > last id" would now be past N forever.
//
// Not parallel: the open transaction holds back the horizon of every
// consumer on the server, which is exactly what it is for.
func TestOutboxDoesNotSkipLateCommits(t *testing.T) {
	ctx := context.Background()

	t.Run("higher id commits first", func(t *testing.T) {
		b := setup(t)
		r := b.runner(t, b.consumer("late-1"), "runner-1")

		tx1, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx1.Rollback(ctx)
		n, err := outbox.Append(ctx, tx1, topic, "a", map[string]string{"tx": "1"})
		require.NoError(t, err)
		var n1 int64
		require.NoError(t, pg.InTx(ctx, b.pool, func(tx2 pgx.Tx) error {
			n1, err = outbox.Append(ctx, tx2, topic, "b", map[string]string{"tx": "2"})
			return err
		}))
		require.Equal(t, n+1, n1)

		// What a naive reader sees now: N+1 committed, N invisible.
		var maxVisible int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT max(id) FROM outbox_event`).Scan(&maxVisible))
		require.Equal(t, n1, maxVisible)

		applied, err := r.Drain(ctx)
		require.NoError(t, err)
		require.Zero(t, applied, "N+1 must wait: a transaction below it is still open")
		p := b.position(t, "late-1")
		require.False(t, p.Covers(outbox.Event{ID: n, TxID: txidOf(t, b.pool, n1)}), "position must not pass the open transaction")
		invariants.Assert(t, b.pool, "outbox")

		require.NoError(t, tx1.Commit(ctx))
		drainAll(t, r, 2)
		require.Equal(t, []int64{n, n1}, b.seenOrder(t, "late-1"))
		invariants.Assert(t, b.pool, "outbox")
	})

	// The same, with the open transaction's xid older than the committed
	// one's while its event id is higher: delivery follows the transactions
	// (tx_id, id), so N+1 comes first, and neither is skipped.
	t.Run("older transaction appends the higher id", func(t *testing.T) {
		b := setup(t)
		r := b.runner(t, b.consumer("late-2"), "runner-1")

		txA, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer txA.Rollback(ctx)
		_, err = txA.Exec(ctx, `SELECT pg_current_xact_id()`) // A takes its xid first
		require.NoError(t, err)
		var n int64
		require.NoError(t, pg.InTx(ctx, b.pool, func(txB pgx.Tx) error {
			n, err = outbox.Append(ctx, txB, topic, "b", map[string]string{"tx": "B"})
			return err
		}))
		n1, err := outbox.Append(ctx, txA, topic, "a", map[string]string{"tx": "A"})
		require.NoError(t, err)

		applied, err := r.Drain(ctx)
		require.NoError(t, err)
		require.Zero(t, applied, "B's event is committed but sorts after A's open transaction")

		require.NoError(t, txA.Commit(ctx))
		drainAll(t, r, 2)
		require.Equal(t, []int64{n1, n}, b.seenOrder(t, "late-2"))
		invariants.Assert(t, b.pool, "outbox")
	})
}

func txidOf(t *testing.T, pool *pgxpool.Pool, id int64) uint64 {
	t.Helper()
	var x uint64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT tx_id FROM outbox_event WHERE id = $1`, id).Scan(&x))
	return x
}

// The effect, its inbox row and the position commit in one transaction,
// so there is no "committed but not acknowledged" window of our own. The
// timeline that would redeliver is built by hand: the runner crashes right
// after its commit (fault point), and the position is rewound to where a
// separately-acknowledging design would have left it (or an operator reset
// it, REL-04). The next runner reads every event again; the inbox turns
// each into a no-op. A crash before the commit leaves nothing behind.
func TestOutboxRedeliveryHasNoSecondEffect(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	const name = "redeliver"
	ids := b.appendCommitted(t, 5)

	b.faults.Fail(outbox.PointAfterCommit, name)
	r1 := b.runner(t, b.consumer(name), "runner-1")
	n, err := r1.RunOnce(ctx)
	require.ErrorIs(t, err, faults.ErrInjected, "the runner dies right after its commit")
	require.Equal(t, 5, n)
	b.faults.Disarm(outbox.PointAfterCommit)

	// The redelivery timeline: position back to zero, the dead runner's
	// lease expired (SQL, not a sleep).
	_, err = b.pool.Exec(ctx, `UPDATE outbox_consumer SET position_tx = '0', position_id = 0, lease_until = now() WHERE name = $1`, name)
	require.NoError(t, err)

	callsBefore := b.calls.Load()
	r2 := b.runner(t, b.consumer(name), "runner-2")
	n, err = r2.Drain(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "every redelivered event was already in the inbox")
	require.Equal(t, callsBefore, b.calls.Load(), "the handler was not even called")
	require.Equal(t, ids, b.seenOrder(t, name))
	require.True(t, b.position(t, name).Covers(outbox.Event{ID: ids[4], TxID: txidOf(t, b.pool, ids[4])}))

	// A crash before the commit: effects and inbox rows roll back together.
	more := b.appendCommitted(t, 3)
	b.faults.Fail(outbox.PointBeforeCommit, name)
	_, err = r2.RunOnce(ctx)
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Equal(t, ids, b.seenOrder(t, name), "nothing of the crashed batch survived")
	b.faults.Disarm(outbox.PointBeforeCommit)
	drainAll(t, r2, 3)
	require.Equal(t, append(ids, more...), b.seenOrder(t, name))
	invariants.Assert(t, b.pool, "outbox")
	// Both runners count into one series per consumer on the registry.
	b.requireCounter(t, 8, "fencelab_outbox_applied_total", name)
	b.requireCounter(t, 5, "fencelab_outbox_redelivered_total", name)
}

func (b *bundle) requireCounter(t *testing.T, want float64, metric, consumer string) {
	t.Helper()
	v, ok, err := promx.Value(b.metrics, metric, "consumer", consumer)
	require.NoError(t, err)
	require.True(t, ok, "no sample of %s{consumer=%q}", metric, consumer)
	require.Equal(t, want, v, "%s{consumer=%q}", metric, consumer)
}

// A runner that stalls while holding the lease is superseded after the
// lease expires; when it wakes, its batch is refused before it reads or
// writes anything, and the position it would have advanced is not its own.
func TestOutboxSupersededRunnerCannotAdvance(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	const name = "superseded"
	ids := b.appendCommitted(t, 4)

	r1 := b.runner(t, b.consumer(name), "runner-1")
	gate := b.faults.Pause(outbox.PointBeforeBatch, name)
	t.Cleanup(gate.Release)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := r1.RunOnce(ctx)
		done <- result{n, err}
	}()
	select {
	case <-gate.Reached():
	case res := <-done:
		t.Fatalf("runner 1 never reached its batch: %d, %v", res.n, res.err)
	}
	fence1 := r1.Fence()

	_, err := b.pool.Exec(ctx, `UPDATE outbox_consumer SET lease_until = now() WHERE name = $1`, name)
	require.NoError(t, err)
	r2 := b.runner(t, b.consumer(name), "runner-2")
	drainAll(t, r2, 4)
	require.Greater(t, r2.Fence(), fence1)

	gate.Release()
	res := <-done
	require.ErrorIs(t, res.err, outbox.ErrLost)
	require.Zero(t, res.n)

	require.Equal(t, ids, b.seenOrder(t, name))
	var staleRows int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM seen WHERE fence <> $1`, r2.Fence()).Scan(&staleRows))
	require.Zero(t, staleRows, "every effect carries the current fence")
	invariants.Assert(t, b.pool, "outbox")
	b.requireCounter(t, 1, "fencelab_outbox_lease_lost_total", name)
	b.requireCounter(t, 2, "fencelab_outbox_lease_acquired_total", name)
}

// A failing handler stops the consumer exactly at the failing event: the
// events before it commit, it is retried, nothing is skipped.
func TestOutboxHandlerErrorStopsAtTheFailingEvent(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	const name = "flaky"
	ids := b.appendCommitted(t, 5)
	c := b.consumer(name)
	apply := c.Handle
	failed := false
	c.Handle = func(ctx context.Context, tx pgx.Tx, ev outbox.Event) error {
		if ev.ID == ids[2] && !failed {
			failed = true
			return errors.New("transient")
		}
		return apply(ctx, tx, ev)
	}
	r := b.runner(t, c, "runner-1")
	n, err := r.RunOnce(ctx)
	require.Error(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, ids[:2], b.seenOrder(t, name))
	invariants.Assert(t, b.pool, "outbox")

	drainAll(t, r, 3)
	require.Equal(t, ids, b.seenOrder(t, name))
	invariants.Assert(t, b.pool, "outbox")
}

func TestOutboxConsumerTopicsAreFixed(t *testing.T) {
	b := setup(t)
	c := b.consumer("fixed")
	require.NoError(t, outbox.Register(context.Background(), b.pool, c))
	c.Topics = []string{"test.other"}
	require.ErrorIs(t, outbox.Register(context.Background(), b.pool, c), outbox.ErrTopicsChanged)
}

func TestOutboxAppendRefusesBadInput(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for name, m := range map[string]outbox.Message{
		"topic":   {Topic: "Bad Topic", Key: "k", Payload: 1},
		"key":     {Topic: topic, Key: "", Payload: 1},
		"payload": {Topic: topic, Key: "k", Payload: []byte("{not json")},
	} {
		err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := outbox.Append(ctx, tx, m.Topic, m.Key, m.Payload)
			return err
		})
		require.ErrorIs(t, err, outbox.ErrInvalid, name)
	}
	// AppendMany keeps the given order.
	var ids []int64
	require.NoError(t, pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = outbox.AppendMany(ctx, tx, []outbox.Message{
			{Topic: topic, Key: "x", Payload: map[string]int{"n": 1}},
			{Topic: topic, Key: "y", Payload: map[string]int{"n": 2}},
		})
		return err
	}))
	require.Len(t, ids, 2)
	require.Less(t, ids[0], ids[1])
}

// Lag is visible per consumer, and the positions and inbox it reports obey
// the invariants at every step.
func TestOutboxStatusShowsLag(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, b.consumer("lagging"), "runner-1")
	require.NoError(t, outbox.Register(ctx, b.pool, b.consumer("lagging")))
	b.appendCommitted(t, 3)

	ss, err := outbox.Statuses(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, ss, 1)
	require.EqualValues(t, 3, ss[0].LagEvents)
	require.Greater(t, ss[0].LagSeconds, 0.0)

	drainAll(t, r, 3)
	ss, err = outbox.Statuses(ctx, b.pool)
	require.NoError(t, err)
	require.Zero(t, ss[0].LagEvents)
	require.EqualValues(t, 3, ss[0].Processed)
	require.Equal(t, "runner-1", *ss[0].Owner)
	invariants.Assert(t, b.pool, "outbox")
}

// The recompute pattern a derived counter needs (LIKE-04): a full
// recompute runs while events keep arriving and the consumer keeps
// applying them. The recompute locks the consumer (LockPosition: no batch
// can interleave), counts the truth in one statement, and records that
// statement's snapshot with the count. The handler then applies an event
// only if its transaction is not visible in the recorded snapshot — those
// the recompute already counted. Every event ends up counted exactly once.
func TestOutboxRecomputeWatermarkCountsEachEventOnce(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `
		CREATE TABLE fact (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, item text NOT NULL);
		CREATE TABLE item_count (item text PRIMARY KEY, n bigint NOT NULL, counted_through pg_snapshot);
		INSERT INTO item_count (item, n) VALUES ('a', 0), ('b', 0), ('c', 0)`)
	require.NoError(t, err)

	c := outbox.Consumer{
		Name:   "counter",
		Topics: []string{topic},
		Handle: func(ctx context.Context, tx pgx.Tx, ev outbox.Event) error {
			_, err := tx.Exec(ctx, `
				UPDATE item_count SET n = n + 1
				 WHERE item = $1
				   AND (counted_through IS NULL OR NOT pg_visible_in_snapshot($2::xid8, counted_through))`,
				ev.Key, ev.TxID)
			return err
		},
	}
	runCtx, stop := context.WithCancel(ctx)
	r1 := b.runner(t, c, "runner-1")
	running := make(chan error, 1)
	go func() { running <- r1.Run(runCtx) }()

	// Appenders: each transaction writes a fact and its event.
	const perAppender, appenders = 300, 4
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAppender {
				item := string(rune('a' + (g+i)%3))
				err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO fact (item) VALUES ($1)`, item); err != nil {
						return err
					}
					_, err := outbox.Append(ctx, tx, topic, item, map[string]string{"item": item})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}

	// Mid-stream: corrupt one count, then recompute all of them.
	require.Eventually(t, func() bool {
		var n int
		_ = b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_inbox`).Scan(&n)
		return n >= 200
	}, 20*time.Second, 2*time.Millisecond)
	_, err = b.pool.Exec(ctx, `UPDATE item_count SET n = n + 1000 WHERE item = 'a'`)
	require.NoError(t, err)
	require.NoError(t, pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := outbox.LockPosition(ctx, tx, "counter"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			UPDATE item_count c
			   SET n = (SELECT count(*) FROM fact f WHERE f.item = c.item),
			       counted_through = pg_current_snapshot()`)
		return err
	}))

	wg.Wait()
	stop()
	require.NoError(t, <-running)
	r2 := b.runner(t, c, "runner-2")
	_, err = r2.CatchUp(ctx)
	require.NoError(t, err)

	rows, err := b.pool.Query(ctx, `
		SELECT c.item, c.n, (SELECT count(*) FROM fact f WHERE f.item = c.item)
		  FROM item_count c ORDER BY c.item`)
	require.NoError(t, err)
	type line struct {
		Item        string
		Count, Fact int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[line])
	require.NoError(t, err)
	total := int64(0)
	for _, l := range got {
		require.Equal(t, l.Fact, l.Count, "item %s: count must equal the facts", l.Item)
		total += l.Fact
	}
	require.EqualValues(t, perAppender*appenders, total)
	invariants.Assert(t, b.pool, "outbox")
}

// Retention never deletes what a consumer still needs, takes the inbox
// rows with the events (OUTBOX-I1), and ages out the events of a topic
// nobody consumes like any other history.
func TestOutboxPurgeKeepsWhatConsumersStillNeed(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	fast := b.runner(t, b.consumer("fast"), "runner-1")
	slow := b.consumer("slow")
	require.NoError(t, outbox.Register(ctx, b.pool, slow))
	b.appendCommitted(t, 5)
	require.NoError(t, pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := outbox.Append(ctx, tx, "test.unsubscribed", "k", 1)
		return err
	}))
	drainAll(t, fast, 5)
	_, err := b.pool.Exec(ctx, `UPDATE outbox_event SET created_at = now() - interval '8 days'`)
	require.NoError(t, err)
	recent := b.appendCommitted(t, 1)
	drainAll(t, fast, 1)

	n, err := outbox.Purge(ctx, b.pool, outbox.DefaultRetention)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only the unsubscribed event: slow has not passed the others yet")

	drainAll(t, b.runner(t, slow, "runner-2"), 6)
	n, err = outbox.Purge(ctx, b.pool, outbox.DefaultRetention)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)

	var events, inbox int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&events))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_inbox`).Scan(&inbox))
	require.Equal(t, 1, events, "the recent event remains")
	require.Equal(t, 2, inbox, "one inbox row per consumer for the recent event")
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event WHERE id = $1`, recent[0]).Scan(&events))
	require.Equal(t, 1, events)
	invariants.Assert(t, b.pool, "outbox")
}
