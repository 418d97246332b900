// Command river is the peer benchmark for `fencelab bench claim`: it drains
// the same number of no-op jobs with github.com/riverqueue/river on the same
// PostgreSQL, with River's defaults. River completes jobs in batches too, but
// its completion does not check who completes (riverqueue/river#1302): this
// is the unfenced baseline. It is a separate Go module so the product does
// not depend on River.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run() error {
	jobs := flag.Int("jobs", 50_000, "jobs to enqueue and drain")
	workers := flag.Int("workers", 2000, "MaxWorkers of the default queue")
	cooldown := flag.Duration("fetch-cooldown", river.FetchCooldownDefault, "River's FetchCooldown: the least time between two fetches, which caps a queue at MaxWorkers jobs per cooldown (River's default, 100 ms, caps 100 workers at 1,000 jobs/s)")
	maxConns := flag.Int("db-max-conns", 12, "database pool size")
	url := flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL")
	flag.Parse()
	if *url == "" {
		return fmt.Errorf("--database-url (or DATABASE_URL) is required")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(*url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(*maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
		return err
	}

	w := river.NewWorkers()
	river.AddWorker(w, &noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		FetchCooldown: *cooldown,
		Workers:       w,
	})
	if err != nil {
		return err
	}

	// As `fencelab bench claim` does: the run (enqueue, then drain) starts
	// right after a checkpoint, so neither side's drain writes back the
	// other's dirty pages or meets a checkpoint the other started.
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		fmt.Printf("  (no CHECKPOINT before the run: %v)\n", err)
	}
	begin := time.Now()
	const chunk = 5000
	for i := 0; i < *jobs; i += chunk {
		n := min(chunk, *jobs-i)
		params := make([]river.InsertManyParams, n)
		for k := range params {
			params[k] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	fmt.Printf("enqueued %d jobs in %v\n", *jobs, time.Since(begin).Round(time.Millisecond))
	if _, err := pool.Exec(ctx, `ANALYZE river_job`); err != nil {
		return err
	}

	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: *jobs + 1000})
	defer cancel()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	for done := 0; done < *jobs; done++ {
		select {
		case <-events:
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("stalled after %d of %d jobs", done, *jobs)
		}
	}
	elapsed := time.Since(start)
	stopCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	_ = client.Stop(stopCtx)

	var completed int
	var p99 float64
	if err := pool.QueryRow(ctx, `
		SELECT count(*),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finalized_at - attempted_at)), 0)
		FROM river_job WHERE state = 'completed'`).Scan(&completed, &p99); err != nil {
		return err
	}
	if completed != *jobs {
		return fmt.Errorf("%d of %d jobs completed", completed, *jobs)
	}
	var fsync, version string
	_ = pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('server_version')`).Scan(&fsync, &version)
	rate := float64(*jobs) / elapsed.Seconds()
	fmt.Printf("river v0.51.2: %d no-op jobs, %d workers, %d connections: %.0f jobs/s (%v); attempted→finalized p99 %.1f ms (unfenced completion)\n",
		*jobs, *workers, *maxConns, rate, elapsed.Round(time.Millisecond), p99*1000)
	fmt.Printf("  PostgreSQL %s, fsync=%s\n", version, fsync)
	fmt.Printf("RESULT system=river jobs=%d workers=%d jobs_per_sec=%.0f p99_ms=%.1f\n", *jobs, *workers, rate, p99*1000)
	if _, err = pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
		return err
	}
	// Vacuumed now rather than by autovacuum during the next measurement
	// (fencelab's drain, on the same server; `fencelab bench claim` does
	// the same for its tables).
	_, err = pool.Exec(ctx, `VACUUM river_job`)
	return err
}
