// Package claimbench is `fencelab bench claim`: enqueue N no-op jobs, then
// drain them with one worker pool doing fenced claims and fenced batched
// completions, and report jobs/s and the claim-to-complete latency measured
// by the database (job_event timestamps). It runs against DATABASE_URL, or a
// fresh local cluster with PostgreSQL's durable defaults (fsync on).
//
// Besides jobs/s it prints the load-independent costs of each phase — WAL
// bytes per job (pg_current_wal_lsn deltas) and round trips and statements
// per job (counted by a pgx tracer on the bench's pool) — and it ends by
// running the claim engine's invariants (CLAIM-I1..I4) over the database,
// failing when any is violated: a faster drain that breaks a fence is not
// a result.
package claimbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
)

const kind = "bench.noop"

// Bench is `fencelab bench claim`.
var Bench = app.Bench{Name: "claim", Summary: "enqueue and drain jobs through the claim engine: claims and completions per second", Run: Run}

// Run runs the benchmark; it drives core/claim directly (no modules).
func Run(_ []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench claim", flag.ContinueOnError)
	jobs := fs.Int("jobs", 50_000, "jobs to enqueue and drain")
	workers := fs.Int("workers", 2000, "worker goroutines")
	maxConns := fs.Int("db-max-conns", 12, "database pool size")
	fetch := fs.Int("fetch-limit", 0, "jobs per claim statement (0: min(workers, 500))")
	batch := fs.Int("complete-batch", 0, "completions per statement (0: 1000)")
	pipelines := fs.Int("pipelines", 0, "claim-and-complete loops, each one round trip per batch (0: 2)")
	shared := setup.Add(fs, "the drain")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobs < 1 || *jobs > 10_000_000 || *workers < 1 || *workers > 10_000 {
		return errors.New("bench claim: --jobs must be 1..10000000 and --workers 1..10000")
	}
	ctx := context.Background()
	srv, dbURL, err := shared.Database(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	trips := &tripCounter{}
	pool, err := pg.Connect(ctx, dbURL, pg.PoolOptions{MaxConns: int32(*maxConns), ApplicationName: "fencelab-bench-claim", Tracer: trips})
	if err != nil {
		return err
	}
	defer pool.Close()
	var fsync, syncCommit, version string
	_ = pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('server_version')`).
		Scan(&fsync, &syncCommit, &version)

	run := make([]byte, 4)
	_, _ = rand.Read(run)
	runID := hex.EncodeToString(run)
	c := claim.NewClient(pool, claim.Options{Owner: "bench-" + runID})
	if err := c.Register(claim.Kind{Name: kind, Handle: func(context.Context, *claim.Job) error { return nil }}); err != nil {
		return err
	}

	checkpoint(ctx, pool)
	walEnqueue, err := walLSN(ctx, pool)
	if err != nil {
		return err
	}
	trips.reset()
	begin := time.Now()
	const chunk = 5000
	for i := 0; i < *jobs; i += chunk {
		n := min(chunk, *jobs-i)
		batch := make([]claim.NewJob, n)
		for k := range batch {
			batch[k] = claim.NewJob{Kind: kind, BusinessKey: fmt.Sprintf("%s-%d", runID, i+k)}
		}
		if _, err := c.EnqueueMany(ctx, pool, batch); err != nil {
			return err
		}
	}
	enqueueElapsed := time.Since(begin)
	enqueueTrips, enqueueStmts := trips.reset()
	walDrain, err := walLSN(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Printf("enqueued %d jobs in %v\n", *jobs, enqueueElapsed.Round(time.Millisecond))
	if _, err := pool.Exec(ctx, `ANALYZE job`); err != nil {
		return err
	}
	// No checkpoint here: the drain runs in the checkpoint cycle its
	// enqueue began, as a job claimed seconds after its enqueue does, and
	// as the River peer's drain does. A checkpoint in between charged the
	// drain a full-page image of every queue page it touched: 1,391 WAL
	// bytes a job against 1,246 without, and 32.1k against 34.1k jobs/s
	// (medians of five alternating drains of 50,000 jobs on 2 cores).
	walStart, err := walLSN(ctx, pool)
	if err != nil {
		return err
	}
	trips.reset()

	stopProfile, err := shared.Profile()
	if err != nil {
		return err
	}
	defer stopProfile()
	start := time.Now()
	err = c.Work(ctx, claim.PoolOptions{Workers: *workers, FetchLimit: *fetch, CompleteBatch: *batch,
		Pipelines: *pipelines, ExitWhenIdle: true, PollInterval: 50 * time.Millisecond})
	elapsed := time.Since(start)
	if err != nil {
		return err
	}
	drainTrips, drainStmts := trips.reset()
	walEnd, err := walLSN(ctx, pool)
	if err != nil {
		return err
	}

	// Statistics as the drain left them: the ANALYZE above saw this run's
	// jobs ready and none of its events, and beside earlier runs' history
	// that estimate once planned this join into minutes.
	if _, err := pool.Exec(ctx, `ANALYZE job, job_history, job_event`); err != nil {
		return err
	}
	var done int
	var p50, p99 float64
	err = pool.QueryRow(ctx, `
		SELECT count(*),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.at - c.at)), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM s.at - c.at)), 0)
		FROM job_history j
		JOIN job_event c ON c.job_id = j.id AND c.event = 'claimed'
		JOIN job_event s ON s.job_id = j.id AND s.event = 'succeeded'
		WHERE j.kind = $1 AND j.business_key LIKE $2 AND j.state = 'succeeded'`, kind, runID+"-%").Scan(&done, &p50, &p99)
	if err != nil {
		return err
	}
	if done != *jobs {
		return fmt.Errorf("bench claim: %d of %d jobs succeeded", done, *jobs)
	}
	rate := float64(*jobs) / elapsed.Seconds()
	fmt.Printf("fencelab claim: %d no-op jobs, %d workers, %d connections: %.0f jobs/s (%v); claim→complete p50 %.1f ms, p99 %.1f ms\n",
		*jobs, *workers, *maxConns, rate, elapsed.Round(time.Millisecond), p50*1000, p99*1000)
	fmt.Printf("  every completion fenced (id, owner, fence, running, lease) with its job_event rows in the same statement\n")
	fmt.Printf("  PostgreSQL %s, fsync=%s, synchronous_commit=%s; the machine is shared, figures are under contention\n", version, fsync, syncCommit)
	perJob := func(v float64) float64 { return v / float64(*jobs) }
	fmt.Printf("  per job: enqueue %.0f WAL bytes, %.4f round trips (%.4f statements); drain %.0f WAL bytes, %.4f round trips (%.4f statements)\n",
		perJob(float64(walDrain-walEnqueue)), perJob(float64(enqueueTrips)), perJob(float64(enqueueStmts)),
		perJob(float64(walEnd-walStart)), perJob(float64(drainTrips)), perJob(float64(drainStmts)))

	// CLAIM-I1..I4 over the whole database after the drain: the bench fails
	// rather than report a rate whose fences or history do not hold.
	reg := invariant.MustRegistry(claim.Invariants)
	if n := invariant.Print(os.Stdout, reg.Run(ctx, pool, "claim")); n > 0 {
		return fmt.Errorf("bench claim: %d invariants violated after the drain (see above)", n)
	}
	fmt.Printf("RESULT system=fencelab jobs=%d workers=%d jobs_per_sec=%.0f p99_ms=%.1f wal_bytes_per_job=%.0f round_trips_per_job=%.4f\n",
		*jobs, *workers, rate, p99*1000, perJob(float64(walEnd-walStart)), perJob(float64(drainTrips)))

	if shared.DatabaseURL != "" { // leave someone else's database as we found it
		_, err = pool.Exec(ctx, `WITH gone AS (DELETE FROM job_history WHERE kind = $1 AND business_key LIKE $2 RETURNING id),
			keys AS (DELETE FROM job_key WHERE job_id IN (SELECT id FROM gone))
			DELETE FROM job_event WHERE job_id IN (SELECT id FROM gone)`, kind, runID+"-%")
		if err != nil {
			return err
		}
		// Vacuum what this run left dead now, so that autovacuum does not
		// do it during the next measurement (bench/claim-vs-river.sh runs
		// River's drain next on the same server; its peer does the same).
		_, err = pool.Exec(ctx, `VACUUM job, job_key, job_event, job_history`)
		return err
	}
	return nil
}

// walLSN is the server's current WAL insert position in bytes: deltas are
// the WAL a phase wrote (the whole cluster's: a throwaway cluster has
// nothing else writing).
func walLSN(ctx context.Context, db pg.Querier) (int64, error) {
	var lsn int64
	err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn)
	if err != nil {
		return 0, fmt.Errorf("bench claim: read WAL position: %w", err)
	}
	return lsn, nil
}

// checkpoint starts the run (its enqueue, and the drain after it) right
// after a checkpoint, so the full-page images in its WAL are not an
// accident of when the last timed checkpoint happened to fall: WAL bytes
// per job compare from run to run. Without the right (pg_checkpoint or superuser)
// the figure is only noisier; the bench says so and goes on.
func checkpoint(ctx context.Context, db pg.Querier) {
	if _, err := db.Exec(ctx, `CHECKPOINT`); err != nil {
		fmt.Printf("  (no CHECKPOINT before the phase: %v; WAL bytes include full-page images by chance)\n", err)
	}
}

// tripCounter counts round trips (a query, or a batch of queries sent
// together) and statements on the bench's pool.
type tripCounter struct{ trips, stmts atomic.Int64 }

func (t *tripCounter) reset() (trips, stmts int64) {
	return t.trips.Swap(0), t.stmts.Swap(0)
}

func (t *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.trips.Add(1)
	t.stmts.Add(1)
	return ctx
}

func (t *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.trips.Add(1)
	return ctx
}

func (t *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	t.stmts.Add(1)
}

func (t *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
