package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
)

// Experiments are the outbox chapter's runnable claims.
var Experiments = []lab.Experiment{OutboxRedelivery, OutboxTwoProcesses}

// OutboxRedelivery: ten events of the demo topic. The consumer's first
// batch crashes before its commit (a fault point): its effects, its inbox
// rows and its position roll back together, so the restarted consumer
// applies all ten, once. Then the stream is delivered again from the start
// (the position rewound, as a restore or a replay would): the inbox
// recognises every event, and no effect doubles.
//
// The naive version is a consumer without its inbox, whose position is not
// in the effect's transaction: it applies the batch and commits, then dies
// before it writes its position; restarted, it reads the same ten events
// and applies them again. It still records what it processed (an inbox
// row per event, in the effect's transaction) but never consults it, and
// the inbox's key is dropped: twenty effect rows for ten events, which
// OUTBOX-I3 reports. Its control is the same consumer without the crash.
var OutboxRedelivery = lab.Experiment{
	ID:         "outbox/redelivery",
	Test:       "TestOutboxRedeliveryAppliesEachEventOnce",
	Claim:      "a consumer whose batch dies before its commit (a failure injected in the process; outbox/two-processes is the real SIGKILL), and a stream delivered twice, still apply each event exactly once",
	Invariants: []string{"outbox"},
	Naive:      "apply the batch in one transaction and save the position in another, with no inbox: a crash in between redelivers the batch",
	Catches:    []string{"OUTBOX-I3"},
	Control:    "the same consumer with no crash between the batch and its position: one delivery",
	Run:        runOutboxRedelivery,
}

func runOutboxRedelivery(x *lab.X) {
	ctx := context.Background()
	pool := labkit.Pool(x, x.Database())
	const events = 10
	var msgs []outbox.Message
	for i := range events {
		msgs = append(msgs, outbox.Message{Topic: outbox.DemoTopic, Key: fmt.Sprintf("k-%02d", i), Payload: outbox.DemoPayload{N: 1}})
	}
	require.NoError(x, pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.AppendMany(ctx, tx, msgs)
		return err
	}))
	x.Step(lab.Step{Actor: "producer", Action: fmt.Sprintf("append %d events to %s in one transaction", events, outbox.DemoTopic), Outcome: lab.Accepted})
	if x.Naive {
		naiveRedelivery(x, pool, events)
		return
	}

	fs := faults.New()
	first, err := outbox.NewRunner(pool, outbox.DemoConsumer(), outbox.Options{Owner: "consumer-1", Faults: fs})
	require.NoError(x, err)
	fs.Fail(outbox.PointBeforeCommit, outbox.DemoConsumerName)
	_, err = first.CatchUp(ctx)
	require.ErrorIs(x, err, faults.ErrInjected)
	x.Step(lab.Step{Actor: "consumer-1", Action: "apply the batch: effects, inbox rows, position — crash before commit", Outcome: "crashed", Fence: first.Fence()})
	effects, inbox := outboxCounts(x, pool)
	require.Zero(x, effects, "the crashed batch rolled back whole")
	require.Zero(x, inbox)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effects, %d inbox rows, position unchanged", effects, inbox)})

	restarted := restartConsumer(x, pool, "consumer-1b")
	n, err := restarted.CatchUp(ctx)
	require.NoError(x, err)
	require.Equal(x, events, n)
	x.Step(lab.Step{Actor: "consumer-1b", Action: "restart: take the lease, apply the batch", Outcome: fmt.Sprintf("%d applied", n), Fence: restarted.Fence()})

	_, err = pool.Exec(ctx, `UPDATE outbox_consumer SET position_tx = '0', position_id = 0 WHERE name = $1`, outbox.DemoConsumerName)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "admin", Action: "rewind the consumer's position to the start (a restore, a replay)"})
	// The redelivery itself is observed: the runner counts every event it
	// read again and its inbox refused (fencelab_outbox_redelivered_total).
	// "0 applied" alone would look the same had the stream never been
	// read again.
	reg := prometheus.NewRegistry()
	_, err = pool.Exec(ctx, `UPDATE outbox_consumer SET lease_until = now() WHERE name = $1 AND owner IS NOT NULL`, outbox.DemoConsumerName)
	require.NoError(x, err)
	again, err := outbox.NewRunner(pool, outbox.DemoConsumer(), outbox.Options{Owner: "consumer-2", Metrics: reg})
	require.NoError(x, err)
	n, err = again.CatchUp(ctx)
	require.NoError(x, err)
	refused := Redelivered(x, reg, outbox.DemoConsumerName)
	x.Step(lab.Step{Actor: "consumer-2", Action: fmt.Sprintf("read the same %d events again", events), Outcome: fmt.Sprintf("%d applied, %d refused by the inbox", n, refused), Fence: again.Fence(),
		Note: "fencelab_outbox_redelivered_total"})
	require.Zero(x, n, "every redelivered event was recognised by the inbox")
	require.Positive(x, refused, "the stream was read again")
	require.Equal(x, events, refused, "the inbox refused every redelivered event, each once")
	x.Figure("redelivered_refused", refused)

	effects, inbox = outboxCounts(x, pool)
	var distinct int
	require.NoError(x, pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM outbox_demo_effect`).Scan(&distinct))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effect rows for %d events, %d inbox rows", effects, distinct, inbox)})
	x.Figure("events", events)
	x.Figure("deliveries", 2)
	x.Figure("effects", effects)
	require.Equal(x, events, effects)
	require.Equal(x, events, distinct)
	require.Equal(x, events, inbox)
}

// restartConsumer ends the current holder's lease (it died, or was
// stopped) and returns a fresh runner under owner.
func restartConsumer(x *lab.X, pool *pgxpool.Pool, owner string) *outbox.Runner {
	x.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE outbox_consumer SET lease_until = now() WHERE name = $1 AND owner IS NOT NULL`, outbox.DemoConsumerName)
	require.NoError(x, err)
	r, err := outbox.NewRunner(pool, outbox.DemoConsumer(), outbox.Options{Owner: owner})
	require.NoError(x, err)
	return r
}

func outboxCounts(x *lab.X, pool *pgxpool.Pool) (effects, inbox int) {
	x.Helper()
	require.NoError(x, pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM outbox_demo_effect), (SELECT count(*) FROM outbox_inbox)`).Scan(&effects, &inbox))
	return effects, inbox
}

// naiveRedelivery is the consumer the chapter argues against, done by the
// experiment on its scratch database: effects in one transaction, the
// position in another, no inbox.
func naiveRedelivery(x *lab.X, pool *pgxpool.Pool, events int) {
	ctx := context.Background()
	require.NoError(x, outbox.Register(ctx, pool, outbox.DemoConsumer()))
	_, err := pool.Exec(ctx, `ALTER TABLE outbox_inbox DROP CONSTRAINT outbox_inbox_pkey`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "drop the inbox's key: the naive schema, an inbox that is written, never read"})
	apply := func(owner string) (n int, last [2]any) {
		var (
			pos     [2]any
			applied int
		)
		err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
				INSERT INTO outbox_demo_effect (event_id, key, n, owner, fence)
				SELECT e.id, e.key, (e.payload ->> 'n')::bigint, $3, 0
				  FROM outbox_event e, outbox_consumer c
				 WHERE c.name = $1 AND e.topic = $2 AND (e.tx_id, e.id) > (c.position_tx, c.position_id)
				 ORDER BY e.tx_id, e.id`, outbox.DemoConsumerName, outbox.DemoTopic, owner)
			if err != nil {
				return err
			}
			applied = int(tag.RowsAffected())
			if _, err := tx.Exec(ctx, `
				INSERT INTO outbox_inbox (consumer, event_id, fence)
				SELECT c.name, e.id, 0
				  FROM outbox_event e, outbox_consumer c
				 WHERE c.name = $1 AND e.topic = $2 AND (e.tx_id, e.id) > (c.position_tx, c.position_id)`,
				outbox.DemoConsumerName, outbox.DemoTopic); err != nil {
				return err
			}
			// e.tx_id qualified: a bare tx_id in ORDER BY is the output
			// column, tx_id::text, whose order puts "996" after "1001".
			return tx.QueryRow(ctx, `SELECT e.tx_id::text, e.id FROM outbox_event e WHERE e.topic = $1 ORDER BY e.tx_id DESC, e.id DESC LIMIT 1`,
				outbox.DemoTopic).Scan(&pos[0], &pos[1])
		})
		require.NoError(x, err)
		return applied, pos
	}
	owner := "consumer-1"
	n, pos := apply(owner)
	x.Step(lab.Step{Actor: "consumer-1", Action: "apply the batch and commit (the inbox not consulted)", Outcome: fmt.Sprintf("%d applied", n)})
	if !x.Control {
		x.Step(lab.Step{Actor: "consumer-1", Action: "crash before saving the position (its own transaction)", Outcome: "crashed", Note: "the effects are committed; the position is not"})
		owner = "consumer-1b"
		n, pos = apply(owner)
		x.Step(lab.Step{Actor: "consumer-1b", Action: "restart: read from the saved position, apply the batch", Outcome: fmt.Sprintf("%d applied", n)})
	}
	_, err = pool.Exec(ctx, `UPDATE outbox_consumer SET position_tx = $2::xid8, position_id = $3 WHERE name = $1`,
		outbox.DemoConsumerName, pos[0], pos[1])
	require.NoError(x, err)
	x.Step(lab.Step{Actor: owner, Action: "save the position past the batch"})
	effects, inbox := outboxCounts(x, pool)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effect rows for %d events, %d inbox rows", effects, events, inbox)})
	x.Figure("events", events)
	x.Figure("effects", effects)
}

// OutboxTwoProcesses: two real `fencelab worker` processes run the same
// consumer over 10,000 events. Half-way, the one holding the lease is
// killed with SIGKILL in the middle of its work and its lease expiry is
// forced with SQL; the other takes over with a higher fence and finishes.
// Ground truth is the effect table: every event applied exactly once, each
// key's events in order, and both processes did part of the work.
var OutboxTwoProcesses = lab.Experiment{
	ID:         "outbox/two-processes",
	Test:       "TestOutboxTwoConsumerProcesses",
	Claim:      "two consumer processes, the lease holder killed with SIGKILL mid-stream: 10,000 events, each applied once and in order per key",
	Invariants: []string{"outbox"},
	Naive:      "two consumer processes (psql) whose position is unfenced and saved after the effects' commit, in a transaction of its own: the first is SIGKILLed between the two commits, and the second applies its 5,000 events again",
	Catches:    []string{"OUTBOX-I3"},
	Control:    "the same two naive consumer processes, no kill: the first saves its position, the second applies only the rest",
	Run:        runOutboxTwoProcesses,
}

func runOutboxTwoProcesses(x *lab.X) {
	if x.Naive {
		naiveTwoProcesses(x)
		return
	}
	ctx := context.Background()
	db := x.Database()
	pool := labkit.Pool(x, db)
	env := x.Env.ChildEnv(db, "FENCELAB_OUTBOX_DEMO=1")
	workers := map[int]*lab.Proc{}
	for _, name := range []string{"process-A", "process-B"} {
		w := x.Spawn(name, env, "worker", "--start-gate")
		w.Expect(x, "READY")
		workers[w.Pid()] = w
		x.Step(lab.Step{Actor: name, Action: fmt.Sprintf("pid %d: run the demo consumer", w.Pid()), Outcome: "ready"})
	}
	for _, w := range workers {
		w.Release(x) // open both start gates
	}

	appendRounds(x, pool, 1, 50)
	x.Say("producer", "append rounds 1–50: 5,000 events over 100 keys, from 8 interleaved transactions")
	waitEffects(x, pool, 1000)

	// Kill the lease holder mid-stream.
	var owner string
	var fence1 int64
	require.NoError(x, pool.QueryRow(ctx, `SELECT owner, fence FROM outbox_consumer WHERE name = $1`,
		outbox.DemoConsumerName).Scan(&owner, &fence1))
	var victim int
	parts := strings.Split(owner, ":")
	require.GreaterOrEqual(x, len(parts), 2, "owner %q is host:pid:…", owner)
	_, err := fmt.Sscanf(parts[1], "%d", &victim)
	require.NoError(x, err)
	require.Contains(x, workers, victim, "the lease holder is one of our workers")
	require.NoError(x, workers[victim].Cmd.Process.Signal(syscall.SIGKILL))
	_ = workers[victim].Wait(x) // killed: a non-nil exit status is the point
	killedAt := outboxEffects(x, pool)
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("SIGKILL %s (pid %d), the lease holder, mid-stream", workers[victim].Name, victim), Outcome: "killed", Fence: fence1,
		Note: fmt.Sprintf("%d effects applied so far", killedAt)})
	_, err = pool.Exec(ctx, `UPDATE outbox_consumer SET lease_until = now() WHERE name = $1 AND owner = $2`,
		outbox.DemoConsumerName, owner)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the dead holder's lease expires (set with SQL)", Fence: fence1})

	appendRounds(x, pool, 51, 100)
	x.Say("producer", "append rounds 51–100: 5,000 more events")
	waitEffects(x, pool, 10000)

	// Let the survivor stop gracefully (it releases its lease).
	for pid, w := range workers {
		if pid != victim {
			var fence2 int64
			require.NoError(x, pool.QueryRow(ctx, `SELECT max(fence) FROM outbox_demo_effect`).Scan(&fence2))
			x.Step(lab.Step{Actor: w.Name, Action: "take the lease over, apply the rest", Outcome: lab.Accepted, Fence: fence2})
			w.Terminate(x)
			require.NoError(x, w.Wait(x), "graceful stop")
			x.Step(lab.Step{Actor: "admin", Action: "SIGTERM " + w.Name, Outcome: "exited 0"})
		}
	}

	var (
		rows, distinct, owners, outOfOrder, wrongCount, missingOrDouble int
		fence2                                                          int64
	)
	require.NoError(x, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id), count(DISTINCT owner), max(fence)
		FROM outbox_demo_effect`).Scan(&rows, &distinct, &owners, &fence2))
	// Every demo event has exactly one effect row.
	require.NoError(x, pool.QueryRow(ctx, `
		SELECT count(*) FROM outbox_event e
		  LEFT JOIN (SELECT event_id, count(*) AS n FROM outbox_demo_effect GROUP BY event_id) f ON f.event_id = e.id
		 WHERE e.topic = $1 AND COALESCE(f.n, 0) <> 1`, outbox.DemoTopic).Scan(&missingOrDouble))
	// Per key, effects were applied in n order: 1, 2, …, 100.
	require.NoError(x, pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE n <> rank) FROM (
		  SELECT n, row_number() OVER (PARTITION BY key ORDER BY seq) AS rank FROM outbox_demo_effect) x`).Scan(&outOfOrder))
	require.NoError(x, pool.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT key FROM outbox_demo_effect GROUP BY key HAVING count(*) <> 100) x`).Scan(&wrongCount))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effects for %d distinct events by %d owners; %d out of order", rows, distinct, owners, outOfOrder), Fence: fence2})
	x.Figure("os_processes", 2)
	x.Figure("events", 10000)
	x.Figure("effects", rows)
	x.Figure("distinct_events", distinct)
	x.Figure("effects_before_kill", killedAt)
	x.Figure("fences", []int64{fence1, fence2})
	x.Figure("out_of_order", outOfOrder)
	require.Equal(x, 10000, rows)
	require.Equal(x, 10000, distinct)
	require.Zero(x, missingOrDouble, "every event has exactly one effect")
	require.Zero(x, outOfOrder, "each key's events applied in order")
	require.Zero(x, wrongCount)
	require.Equal(x, 2, owners, "both processes applied part of the stream")
	require.Greater(x, fence2, fence1)
	// What autovacuum does soon after a burst of 10,000 events: without
	// statistics the invariants' anti-join over the inbox may plan as a
	// nested loop, and the check (not the consumer) becomes the slow part.
	_, err = pool.Exec(ctx, `ANALYZE outbox_event, outbox_inbox, outbox_consumer`)
	require.NoError(x, err)
}

// appendRounds appends rounds [from, to] of the demo stream: in round r,
// every key k-00..k-99 gets one event with n = r. Eight appenders each own
// a slice of the keys and commit their rounds one after another, so a
// key's events are appended (and committed) in n order, while the eight
// appenders' transactions interleave and commit out of id order.
func appendRounds(x *lab.X, pool *pgxpool.Pool, from, to int) {
	x.Helper()
	const appenders, keys = 8, 100
	errs := make([]error, appenders)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Go(func() {
			for r := from; r <= to; r++ {
				var msgs []outbox.Message
				for k := g; k < keys; k += appenders {
					msgs = append(msgs, outbox.Message{Topic: outbox.DemoTopic, Key: fmt.Sprintf("k-%02d", k),
						Payload: outbox.DemoPayload{N: int64(r)}})
				}
				err := pg.InTx(context.Background(), pool, func(tx pgx.Tx) error {
					_, err := outbox.AppendMany(context.Background(), tx, msgs)
					return err
				})
				if err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(x, errors.Join(errs...))
}

func outboxEffects(x *lab.X, pool *pgxpool.Pool) int {
	x.Helper()
	var n int
	require.NoError(x, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_demo_effect`).Scan(&n))
	return n
}

// waitEffects polls the effect table until it holds at least n rows.
func waitEffects(x *lab.X, pool *pgxpool.Pool, n int) {
	x.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for outboxEffects(x, pool) < n {
		if time.Now().After(deadline) {
			x.Fatalf("the demo consumer did not reach %d effects", n)
		}
		time.Sleep(10 * time.Millisecond) // polling progress, not standing in for a boundary
	}
}
