package growthbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Bench is `fencelab bench growth`.
var Bench = app.Bench{Name: "growth",
	Summary: "history in every growing table on scratch databases: purge batches, a /metrics scrape, stats and feed reads, claim throughput at 0 and N rows",
	Run:     Run}

// Run parses flags and runs the benchmark: two scratch databases on one
// server, one loaded with no history and one with --history rows per
// growing table, measured side by side; both are dropped at the end. It
// drives the modules' stores directly (the module list is not needed).
func Run(_ []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench growth", flag.ContinueOnError)
	history := fs.Int("history", 1_000_000, "rows of history per growing table")
	shared := setup.AddServer(fs)
	jobs := fs.Int("claim-jobs", 50_000, "jobs drained per round to measure claim throughput")
	workers := fs.Int("workers", 200, "claim worker goroutines")
	repeat := fs.Int("repeat", 5, "runs per query (the median is reported)")
	rounds := fs.Int("claim-rounds", 5, "alternating claim drains on each database (the ratio is their median)")
	keep := fs.Bool("keep", false, "keep the scratch databases (their URLs and the run's id are printed)")
	reuse := fs.String("reuse", "", "measure the databases an earlier --keep run (this id) left on --database-url, "+
		"migrated up, instead of loading new ones; they are kept")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *history < 0 || *history > 100_000_000 || *jobs < 100 || *repeat < 1 || *rounds < 1 {
		return errors.New("bench growth: --history must be 0..100000000, --claim-jobs ≥ 100, --repeat ≥ 1, --claim-rounds ≥ 1")
	}
	if *reuse != "" && (shared.DatabaseURL == "" || !validRunID(*reuse)) {
		return errors.New("bench growth: --reuse takes the 8-hex-digit id a --keep run printed, and needs that run's --database-url")
	}
	ctx := context.Background()
	srv, err := shared.Server(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	admin, err := pg.Connect(ctx, srv.URL(""), pg.PoolOptions{MaxConns: 2, ApplicationName: "fencelab-bench-growth"})
	if err != nil {
		return err
	}
	defer admin.Close()
	var version string
	_ = admin.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&version)

	run := make([]byte, 4)
	_, _ = rand.Read(run)
	id := hex.EncodeToString(run)
	if *reuse != "" {
		id = *reuse
	} else if *keep {
		fmt.Printf("run id %s (measure it again: --reuse %s --history %d --database-url …)\n", id, id, *history)
	}
	sizes := []int{0, *history}
	scratches := make([]*scratch, len(sizes))
	for i, h := range sizes {
		name := fmt.Sprintf("fencelab_growth_%s_%d", id, h)
		if *reuse != "" {
			fmt.Printf("history %d: reusing %s …\n", h, name)
			if scratches[i], err = reopen(ctx, srv.URL(name), h); err != nil {
				return err
			}
			defer scratches[i].pool.Close()
			continue
		}
		u, drop, err := setup.Scratch(ctx, srv, name)
		if err != nil {
			return fmt.Errorf("bench growth: %w", err)
		}
		if !*keep {
			defer func() {
				if err := drop(); err != nil {
					fmt.Fprintf(os.Stderr, "bench growth: drop %s: %v\n", name, err)
				}
			}()
		} else {
			fmt.Printf("keeping %s\n", u)
		}
		fmt.Printf("history %d: loading …\n", h)
		sc, err := prepare(ctx, u, h)
		if err != nil {
			return err
		}
		defer sc.pool.Close()
		scratches[i] = sc
	}
	// Both databases are loaded before anything is timed, so the queries
	// at 0 and at N run minutes apart at most, not a whole load apart.
	// The load's own dirty pages are written out first: a bulk load leaves
	// gigabytes for the checkpointer, which a year of history would have
	// written long ago, and timing claims under that write-back measures
	// the load, not the history.
	fmt.Println("checkpoint …")
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		fmt.Printf("  not taken (%v): the load's write-back may overlap the timing\n", err)
	}
	results := make([]phase, len(scratches))
	for i, sc := range scratches {
		results[i] = phase{history: sc.history, load: sc.load, reused: sc.reused}
	}
	// Claim throughput side by side, first: alternating drains on the
	// empty and the grown database, the order swapped every round,
	// beginning right after the load, so that whatever autovacuum does to
	// the claimed table after a load (and after each drain's churn) falls
	// inside the timing. The ratio is the median of the rounds' ratios,
	// and the minimum is reported beside it: one drain slowed by a vacuum
	// that walks the history is the figure this design is judged by.
	var ratios []float64
	for r := range *rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		rate := make([]float64, 2)
		for _, i := range order {
			if rate[i], err = drain(ctx, scratches[i], fmt.Sprintf("%x-%d", run, r), *jobs, *workers); err != nil {
				return err
			}
			results[i].claimRates = append(results[i].claimRates, rate[i])
		}
		fmt.Printf("claim round %d: %.0f jobs/s at 0, %.0f jobs/s at %d (ratio %.2f)\n", r+1, rate[0], rate[1], *history, rate[1]/rate[0])
		ratios = append(ratios, rate[1]/rate[0])
	}
	for i, sc := range scratches {
		fmt.Printf("history %d: measuring …\n", sc.history)
		rates := results[i].claimRates
		if results[i], err = measure(ctx, sc, *repeat); err != nil {
			return err
		}
		results[i].claimRates = rates
	}
	if len(results[0].rows) != len(results[1].rows) {
		return fmt.Errorf("bench growth: %d probes at 0 against %d at %d (an expired day on one side only?)",
			len(results[0].rows), len(results[1].rows), *history)
	}
	// Retention last (it drops what it purges): claim.purge's drop of the
	// one day of finished jobs wholly past the retention, timed on each.
	for i, sc := range scratches {
		if results[i].purgeDay, results[i].purgeDayJobs, err = purgeDay(ctx, sc); err != nil {
			return err
		}
	}
	report(os.Stdout, results, load.Median(ratios), slices.Min(ratios), version)
	return nil
}

func validRunID(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 4
}

// reopen migrates a kept scratch database up (new migrations apply to the
// loaded history, as they would in production) and connects to it.
func reopen(ctx context.Context, u string, history int) (*scratch, error) {
	if err := (pg.Migrator{FS: migrations.FS, URL: u}).Up(); err != nil {
		return nil, fmt.Errorf("bench growth: reuse: %w", err)
	}
	pool, err := pg.Connect(ctx, u, pg.PoolOptions{MaxConns: 12, ApplicationName: "fencelab-bench-growth"})
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		pool.Close()
		return nil, err
	}
	return &scratch{history: history, pool: pool, reused: true}, nil
}

// row is one measured query.
type row struct {
	name     string
	when     pg.When
	ms       float64
	examined int64
}

type phase struct {
	history    int
	load       time.Duration
	reused     bool
	rows       []row
	claimRates []float64 // one per round

	purgeDay     time.Duration // claim.purge dropping the expired day
	purgeDayJobs int64         // the jobs that day held
}

// scratch is one loaded database.
type scratch struct {
	history int
	load    time.Duration
	reused  bool
	pool    *pgxpool.Pool
}

// prepare loads history rows into the migrated scratch database.
func prepare(ctx context.Context, u string, history int) (*scratch, error) {
	pool, err := pg.Connect(ctx, u, pg.PoolOptions{MaxConns: 12, ApplicationName: "fencelab-bench-growth"})
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	if err := Load(ctx, pool, history, LoadOptions{Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }}); err != nil {
		pool.Close()
		return nil, err
	}
	return &scratch{history: history, load: time.Since(begin), pool: pool}, nil
}

func measure(ctx context.Context, sc *scratch, repeat int) (phase, error) {
	p := phase{history: sc.history, load: sc.load, reused: sc.reused}
	pool := sc.pool

	probes, err := Probes(ctx, pool)
	if err != nil {
		return p, err
	}
	var scrapeRows int64
	for _, pr := range probes {
		r := row{name: pr.Name, when: pr.When}
		var ms []float64
		for range repeat {
			plan, err := pg.Explain(ctx, pool, pr.SQL, pr.Args...)
			if err != nil {
				return p, fmt.Errorf("bench growth: %s: %w", pr.Name, err)
			}
			ms, r.examined = append(ms, plan.Ms), plan.Examined
		}
		r.ms = load.Median(ms)
		if pr.When == pg.PerScrape {
			scrapeRows += r.examined
		}
		p.rows = append(p.rows, r)
	}

	// A feed page (push: the inbox read), as the feed benchmark measures it.
	st, err := feed.ParseStrategy("push", feed.DefaultThreshold)
	if err != nil {
		return p, err
	}
	fsvc, err := feed.NewService(app.Standalone(pool), feed.Config{Strategy: st, CursorKey: feed.CursorKey([]byte("bench-growth-cursor-key"))})
	if err != nil {
		return p, err
	}
	fr := row{name: "feed page (push, 20 posts)", when: pg.PerRequest}
	var fms []float64
	for range repeat {
		s, err := fsvc.Explain(ctx, st, Reader, 20)
		if err != nil {
			return p, err
		}
		fms, fr.examined = append(fms, float64(s.Execution.Microseconds())/1000), s.RowsScanned
	}
	fr.ms = load.Median(fms)
	p.rows = append(p.rows, fr)

	// One /metrics scrape of every database-reading collector (claim
	// queue, outbox lag, social view lag), timed as Prometheus would see
	// it; its rows are the per-scrape probes' sum.
	reg := prometheus.NewRegistry()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := app.Standalone(pool)
	d.Log, d.Metrics = quiet, reg
	d.Config.TokenSecret = "bench-growth-secret"
	d.Jobs = claim.NewClient(pool, claim.Options{Log: quiet, Metrics: reg, Owner: "bench-growth"})
	if err := reg.Register(outbox.LagCollector(pool, quiet)); err != nil {
		return p, err
	}
	if _, err := rel.Build(d); err != nil {
		return p, err
	}
	var sms []float64
	for range repeat {
		t0 := time.Now()
		mfs, err := reg.Gather()
		if err != nil {
			return p, fmt.Errorf("bench growth: scrape: %w", err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "fencelab_collector_up" {
				for _, m := range mf.GetMetric() {
					if m.GetGauge().GetValue() != 1 {
						return p, fmt.Errorf("bench growth: a collector failed: %v", m.GetLabel())
					}
				}
			}
		}
		sms = append(sms, float64(time.Since(t0).Microseconds())/1000)
	}
	p.rows = append(p.rows, row{name: "/metrics scrape (claim, outbox, social)", when: pg.PerScrape, ms: load.Median(sms), examined: scrapeRows})

	return p, nil
}

// drain enqueues jobs no-op jobs on the scratch database and times the
// claim engine draining them (the round's business keys carry its own
// tag, unique across runs on a reused database), with the history in the
// table.
func drain(ctx context.Context, sc *scratch, round string, jobs, workers int) (float64, error) {
	pool := sc.pool
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := claim.NewClient(pool, claim.Options{Log: quiet, Metrics: prometheus.NewRegistry(), Owner: "bench-growth"})
	if err := c.Register(claim.Kind{Name: "growth.tp", Handle: func(context.Context, *claim.Job) error { return nil }}); err != nil {
		return 0, err
	}
	const chunk = 5000
	for i := 0; i < jobs; i += chunk {
		batch := make([]claim.NewJob, min(chunk, jobs-i))
		for k := range batch {
			batch[k] = claim.NewJob{Kind: "growth.tp", BusinessKey: fmt.Sprintf("tp-%s-%d", round, i+k)}
		}
		if _, err := c.EnqueueMany(ctx, pool, batch); err != nil {
			return 0, err
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE job`); err != nil {
		return 0, err
	}
	const sqlDone = `SELECT count(*) FROM job_history WHERE kind = 'growth.tp' AND state = 'succeeded' AND business_key LIKE 'tp-' || $1 || '-%'`
	t0 := time.Now()
	if err := c.Work(ctx, claim.PoolOptions{Workers: workers, ExitWhenIdle: true, PollInterval: 50 * time.Millisecond}); err != nil {
		return 0, err
	}
	elapsed := time.Since(t0)
	var done int
	if err := pool.QueryRow(ctx, sqlDone, round).Scan(&done); err != nil {
		return 0, err
	}
	if done != jobs {
		return 0, fmt.Errorf("bench growth: %d of %d jobs succeeded", done, jobs)
	}
	return float64(jobs) / elapsed.Seconds(), nil
}

// purgeDay times claim.purge's drop of the expired days (the load puts the
// purgeable jobs on one day wholly past the retention): the day's events
// and a catalog change, whatever the history beside it.
func purgeDay(ctx context.Context, sc *scratch) (time.Duration, int64, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := claim.NewClient(sc.pool, claim.Options{Log: quiet, Metrics: prometheus.NewRegistry(), Owner: "bench-growth"})
	t0 := time.Now()
	_, jobs, err := c.PurgeDays(ctx, Retention)
	if err != nil {
		return 0, 0, fmt.Errorf("bench growth: purge days: %w", err)
	}
	return time.Since(t0), jobs, nil
}

func report(w io.Writer, ps []phase, ratio, minRatio float64, version string) {
	empty, full := ps[0], ps[len(ps)-1]
	fmt.Fprintf(w, "\nfencelab growth: every periodic, per-scrape and per-request query at history 0 and %d (PostgreSQL %s)\n", full.history, version)
	if full.reused {
		fmt.Fprintf(w, "  load: reused the databases of an earlier --keep run (%d rows per growing table)\n", full.history)
	} else {
		fmt.Fprintf(w, "  load: %v for %d rows per growing table\n", full.load.Round(time.Second), full.history)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "query\twhen\tms @0\trows @0\tms @%d\trows @%d\t\n", full.history, full.history)
	worst, worstMs := "", -1.0
	for i, r := range full.rows {
		e := empty.rows[i]
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%d\t%.2f\t%d\t\n", r.name, r.when, e.ms, e.examined, r.ms, r.examined)
		if r.ms > worstMs {
			worst, worstMs = r.name, r.ms
		}
	}
	fmt.Fprintf(tw, "claim throughput (jobs/s, median of %d alternating rounds from the load on)\tper-job\t%.0f\t\t%.0f\t\t\n",
		len(full.claimRates), load.Median(empty.claimRates), load.Median(full.claimRates))
	fmt.Fprintf(tw, "claim.purge: drop the expired day (jobs dropped)\tperiodic\t%.2f\t%d\t%.2f\t%d\t\n",
		ms(empty.purgeDay), empty.purgeDayJobs, ms(full.purgeDay), full.purgeDayJobs)
	_ = tw.Flush()
	fmt.Fprintf(w, "  rows = rows examined by every scan (EXPLAIN ANALYZE); ms = median execution time; the machine is shared, figures are under contention\n")
	fmt.Fprintf(w, "  claim rounds' ratios: median %.2f, minimum %.2f\n", ratio, minRatio)
	fmt.Fprintf(w, "RESULT growth history=%d worst_query=%s worst_ms=%.2f claim_ratio=%.2f claim_min_ratio=%.2f purge_day_ms_0=%.2f purge_day_ms=%.2f\n",
		full.history, strings.ReplaceAll(worst, " ", "_"), worstMs, ratio, minRatio, ms(empty.purgeDay), ms(full.purgeDay))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
