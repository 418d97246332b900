// Package outboxbench is `fencelab bench outbox`: the append rate inside
// business transactions, consumer throughput, and consumer lag under a
// steady load, with PostgreSQL's durable defaults (fsync on).
package outboxbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
)

// Topic is the bench's own topic, so a run against a shared database
// neither feeds nor starves the demo consumer.
const Topic = "outbox.bench"

type config struct {
	url      string
	clients  int
	duration time.Duration
	backlog  int
	batch    int
	rate     int
	lagFor   time.Duration
}

// Bench is `fencelab bench outbox`.
var Bench = app.Bench{Name: "outbox", Summary: "append throughput with the outbox, backlog drain rate and steady-state lag", Run: Run}

// Run runs the benchmark; it drives core/outbox directly (no modules).
func Run(_ []app.Module, args []string) error {
	var c config
	fs := flag.NewFlagSet("bench outbox", flag.ContinueOnError)
	shared := setup.Add(fs, "")
	fs.IntVar(&c.clients, "clients", 8, "concurrent business transactions in the append phase")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "length of each append phase")
	fs.IntVar(&c.backlog, "backlog", 50000, "events in the backlog the consumers drain")
	fs.IntVar(&c.batch, "batch", outbox.DefaultBatchSize, "consumer batch size")
	fs.IntVar(&c.rate, "rate", 1000, "steady append rate (events/s) in the lag phase")
	fs.DurationVar(&c.lagFor, "lag-duration", 10*time.Second, "length of the lag phase")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fencelab bench outbox [flags]\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.clients < 1 || c.backlog < 1 || c.batch < 1 || c.rate < 1 || c.duration <= 0 || c.lagFor <= 0 {
		return errors.New("bench outbox: clients, backlog, batch, rate and durations must be positive")
	}
	ctx := context.Background()
	srv, url, err := shared.Database(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	c.url = url
	pool, err := pg.Connect(ctx, c.url, pg.PoolOptions{MaxConns: int32(c.clients + 4), ApplicationName: "fencelab-bench-outbox"})
	if err != nil {
		return err
	}
	defer pool.Close()
	b := &bench{c: c, pool: pool, run: time.Now().Format("150405")}
	defer b.cleanup(ctx)
	return b.all(ctx)
}

type bench struct {
	c    config
	pool *pgxpool.Pool
	run  string
	rows [][2]string
	// The figures of the RESULT line, filled in as the phases run.
	baseTx, oneTx, tenTx, batchEvents, perEventEvents float64
}

func (b *bench) report(what, figure string) {
	b.rows = append(b.rows, [2]string{what, figure})
	fmt.Printf("  %-58s %s\n", what, figure)
}

func (b *bench) all(ctx context.Context) error {
	var fsync, sync string
	_ = b.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &sync)
	fmt.Printf("fencelab bench outbox — fsync=%s synchronous_commit=%s, %d clients, batch %d\n", fsync, sync, b.c.clients, b.c.batch)
	if _, err := b.pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS outbox_bench_account (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO outbox_bench_account SELECT g, 0 FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		return err
	}

	fmt.Println("append inside business transactions (UPDATE one of 1,000 rows; commit):")
	base, err := b.appendPhase(ctx, 0)
	if err != nil {
		return err
	}
	b.baseTx = base
	b.report("business tx, no event", fmt.Sprintf("%.0f tx/s", base))
	one, err := b.appendPhase(ctx, 1)
	if err != nil {
		return err
	}
	b.oneTx = one
	b.report("business tx + Append (1 event)", fmt.Sprintf("%.0f tx/s = %.0f events/s (%.0f%% of baseline)", one, one, 100*one/base))
	ten, err := b.appendPhase(ctx, 10)
	if err != nil {
		return err
	}
	b.tenTx = ten
	b.report("business tx + AppendMany (10 events)", fmt.Sprintf("%.0f tx/s = %.0f events/s", ten, 10*ten))

	fmt.Printf("consumer throughput (backlog of %d events):\n", b.c.backlog)
	if err := b.fillBacklog(ctx); err != nil {
		return err
	}
	for _, perEvent := range []bool{false, true} {
		rate, err := b.drainPhase(ctx, perEvent)
		if err != nil {
			return err
		}
		what, figure := "batch handler (one multi-row INSERT per batch)", &b.batchEvents
		if perEvent {
			what, figure = "per-event handler (one INSERT per event)", &b.perEventEvents
		}
		*figure = rate
		b.report(what, fmt.Sprintf("%.0f events/s", rate))
	}

	fmt.Printf("lag under a steady load of %d events/s for %s (consumer running, poll %s):\n", b.c.rate, b.c.lagFor, outbox.DefaultPollInterval)
	return b.lagPhase(ctx)
}

// appendPhase runs business transactions with perTx events each for the
// configured duration and returns transactions per second.
func (b *bench) appendPhase(ctx context.Context, perTx int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.c.duration)
	defer cancel()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := range b.c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := (w*7919+i*104729)%1000 + 1
				err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE outbox_bench_account SET balance = balance + 1 WHERE id = $1`, id); err != nil {
						return err
					}
					switch perTx {
					case 0:
						return nil
					case 1:
						_, err := outbox.Append(ctx, tx, Topic, fmt.Sprintf("acct-%d", id), map[string]int{"n": i})
						return err
					default:
						msgs := make([]outbox.Message, perTx)
						for j := range msgs {
							msgs[j] = outbox.Message{Topic: Topic, Key: fmt.Sprintf("acct-%d", id), Payload: map[string]int{"n": i}}
						}
						_, err := outbox.AppendMany(ctx, tx, msgs)
						return err
					}
				})
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// fillBacklog tops the bench topic up to the configured backlog.
func (b *bench) fillBacklog(ctx context.Context) error {
	var have int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event WHERE topic = $1`, Topic).Scan(&have); err != nil {
		return err
	}
	for have < b.c.backlog {
		n := min(5000, b.c.backlog-have)
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: Topic, Key: fmt.Sprintf("acct-%d", i%1000), Payload: map[string]int{"n": have + i}}
		}
		if err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := outbox.AppendMany(ctx, tx, msgs)
			return err
		}); err != nil {
			return err
		}
		have += n
	}
	return nil
}

func (b *bench) consumer(name string, perEvent bool) outbox.Consumer {
	c := outbox.DemoConsumer()
	c.Name, c.Topics, c.BatchSize = name, []string{Topic}, b.c.batch
	if perEvent {
		c.HandleBatch = nil
		c.Handle = func(ctx context.Context, tx pgx.Tx, ev outbox.Event) error {
			l := outbox.LeaseOf(ctx)
			_, err := tx.Exec(ctx, `INSERT INTO outbox_demo_effect (event_id, key, n, owner, fence) VALUES ($1, $2, 0, $3, $4)`,
				ev.ID, ev.Key, l.Owner, l.Fence)
			return err
		}
	}
	return c
}

// drainPhase runs a fresh consumer over the whole backlog.
func (b *bench) drainPhase(ctx context.Context, perEvent bool) (float64, error) {
	name := fmt.Sprintf("bench.drain-%s-%v", b.run, perEvent)
	r, err := outbox.NewRunner(b.pool, b.consumer(name, perEvent), outbox.Options{Owner: name})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n, err := r.CatchUp(ctx)
	if err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// lagPhase appends at a steady rate while a consumer runs, then reports
// the delay from each event's transaction start to its effect.
func (b *bench) lagPhase(ctx context.Context) error {
	name := "bench.lag-" + b.run
	c := b.consumer(name, false)
	r, err := outbox.NewRunner(b.pool, c, outbox.Options{Owner: name})
	if err != nil {
		return err
	}
	if _, err := r.CatchUp(ctx); err != nil { // start from the end of the backlog
		return err
	}
	var startID int64
	if err := b.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM outbox_event`).Scan(&startID); err != nil {
		return err
	}
	runCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	consumerDone := make(chan error, 1)
	go func() { consumerDone <- r.Run(runCtx) }()

	// Sample the consumer's lag as the admin endpoint reports it.
	var maxLagEvents int64
	stopSampling := load.Every(ctx, 250*time.Millisecond, func(ctx context.Context) {
		ss, err := outbox.Statuses(ctx, b.pool)
		if err != nil {
			return
		}
		for _, s := range ss {
			if s.Name == name && s.LagEvents > maxLagEvents {
				maxLagEvents = s.LagEvents
			}
		}
	})
	defer stopSampling()

	const appenders = 8
	interval := time.Duration(float64(time.Second) * appenders / float64(b.c.rate))
	appendCtx, stopAppending := context.WithTimeout(ctx, b.c.lagFor)
	defer stopAppending()
	var appended atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(w) * interval / appenders)
			for i := 0; ; i++ {
				if d := time.Until(next); d > 0 {
					select {
					case <-appendCtx.Done():
						return
					case <-time.After(d):
					}
				}
				if appendCtx.Err() != nil {
					return
				}
				next = next.Add(interval)
				id := (w*7919+i*104729)%1000 + 1
				err := pg.InTx(appendCtx, b.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(appendCtx, `UPDATE outbox_bench_account SET balance = balance + 1 WHERE id = $1`, id); err != nil {
						return err
					}
					_, err := outbox.Append(appendCtx, tx, Topic, fmt.Sprintf("acct-%d", id), map[string]int{"n": i})
					return err
				})
				if err == nil {
					appended.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	stopAppending()
	achieved := float64(appended.Load()) / time.Since(start).Seconds()
	catchUpCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var pending int64
		if err := b.pool.QueryRow(catchUpCtx, `SELECT count(*) FROM outbox_event e WHERE e.id > $1 AND e.topic = $2
			AND NOT EXISTS (SELECT 1 FROM outbox_inbox i WHERE i.consumer = $3 AND i.event_id = e.id)`, startID, Topic, name).Scan(&pending); err != nil {
			return err
		}
		if pending == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopSampling()
	stopConsumer()
	if err := <-consumerDone; err != nil {
		return err
	}

	var p50, p99, pmax float64
	var n int64
	if err := b.pool.QueryRow(ctx, `
		SELECT count(*),
		       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY lag),
		       max(lag)
		  FROM (SELECT EXTRACT(EPOCH FROM f.applied_at - e.created_at) * 1000 AS lag
		          FROM outbox_demo_effect f JOIN outbox_event e ON e.id = f.event_id
		         WHERE f.owner = $1 AND e.id > $2) x`, name, startID).Scan(&n, &p50, &p99, &pmax); err != nil {
		return err
	}
	b.report("achieved append rate", fmt.Sprintf("%.0f events/s (%d events)", achieved, n))
	b.report("lag, event tx start → effect applied", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms", p50, p99, pmax))
	b.report("largest lag_events sample (GET /outbox/consumers)", fmt.Sprint(maxLagEvents))
	b.summary()
	load.Result("outbox", "base_tx_per_sec", b.baseTx, "append_tx_per_sec", b.oneTx, "append_ratio", b.oneTx/b.baseTx,
		"append_many_events_per_sec", 10*b.tenTx, "drain_batch_events_per_sec", b.batchEvents,
		"drain_per_event_events_per_sec", b.perEventEvents, "lag_rate", achieved, "lag_p50_ms", p50, "lag_p99_ms", p99,
		"lag_max_events", maxLagEvents)
	return nil
}

func (b *bench) summary() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nsummary\t")
	for _, r := range b.rows {
		fmt.Fprintf(w, "  %s\t%s\n", r[0], r[1])
	}
	_ = w.Flush()
}

// cleanup removes this run's consumers and the bench topic, so a run
// against a shared database leaves the invariants as it found them.
func (b *bench) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, _ = b.pool.Exec(ctx, `
		DELETE FROM outbox_demo_effect WHERE owner LIKE 'bench.%';
		DELETE FROM outbox_inbox WHERE consumer LIKE 'bench.%';
		DELETE FROM outbox_consumer WHERE name LIKE 'bench.%';
		DELETE FROM outbox_event WHERE topic = 'outbox.bench';
		DROP TABLE IF EXISTS outbox_bench_account`)
}
