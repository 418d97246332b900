// Package consolebench is `fencelab bench console`: the server time of
// every console page, first on an empty database and then, in the same
// run, after 1,000,000 finished claim jobs (two events each) and 200,000
// consumed outbox events are bulk-inserted — the history a long-lived
// deployment carries. A page must cost what it shows, not what is behind
// it: the ratio of the two is the figure. The invariant check, which reads
// whole histories by design, runs in the background and is reported
// separately, never on a page view.
//
// Requests are served by the real deployable's echo instance (every module,
// every middleware, the console) called in-process, so the figure is
// server time without a network in between.
package consolebench

import (
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

type config struct {
	url      string
	jobs     int
	events   int
	requests int
}

// Bench is `fencelab bench console`.
var Bench = app.Bench{Name: "console", Summary: "every console page's server time, empty and with 1,000,000 finished jobs of history", Run: Run}

// Run runs the benchmark on the deployable mods (the console among them).
func Run(mods []app.Module, args []string) error {
	var c config
	fs := flag.NewFlagSet("bench console", flag.ContinueOnError)
	fs.StringVar(&c.url, "database-url", app.Env("DATABASE_URL", ""), "PostgreSQL server to make a scratch database on (its role must create databases); empty: a fresh local cluster")
	fs.IntVar(&c.jobs, "jobs", 1_000_000, "finished claim jobs of history to bulk-insert")
	fs.IntVar(&c.events, "outbox-events", 200_000, "consumed outbox events of history to bulk-insert")
	fs.IntVar(&c.requests, "requests", 40, "requests per page and phase")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fencelab bench console [flags]\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.jobs < 1 || c.events < 0 || c.requests < 5 {
		return errors.New("bench console: jobs ≥ 1, outbox-events ≥ 0, requests ≥ 5")
	}
	ctx := context.Background()
	srv, err := pgserver.Provision(ctx, c.url, pgserver.Options{})
	if err != nil {
		return err
	}
	defer srv.Close()
	db := fmt.Sprintf("fencelab_bench_console_%d", os.Getpid())
	if err := exec(ctx, srv.URL(""), "CREATE DATABASE "+db); err != nil {
		return err
	}
	defer func() { _ = exec(ctx, srv.URL(""), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") }()
	dbURL := srv.URL(db)
	if err := (pg.Migrator{FS: migrations.FS, URL: dbURL}).Up(); err != nil {
		return err
	}
	return run(ctx, c, dbURL, mods)
}

func exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

type page struct {
	name, path string
}

func run(ctx context.Context, c config, dbURL string, mods []app.Module) error {
	cfg := app.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.AccessLog = false
	cfg.TokenSecret = crand.Text()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	p, err := app.Build(ctx, cfg, mods, app.BuildOptions{Role: "bench-console", Log: log})
	if err != nil {
		return err
	}
	defer p.Close()
	pool, auth := p.Deps.Pool, p.Deps.Auth
	e := p.HTTP()
	tok, err := auth.Mint("admin-0001", httpx.RoleAdmin, time.Hour)
	if err != nil {
		return err
	}

	var version string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&version); err != nil {
		return err
	}
	fmt.Printf("fencelab bench console — PostgreSQL %s, %d requests per page and phase, served in-process (server time, no network)\n", version, c.requests)
	fmt.Printf("server and PostgreSQL share one %d-core machine with other work: figures taken under contention\n\n", runtime.NumCPU())

	// Live rows both phases share: a small queue and a few jobs waiting
	// for a person, so the pages have something to show.
	if _, err := pool.Exec(ctx, sqlLive); err != nil {
		return fmt.Errorf("bench console: live rows: %w", err)
	}
	var reviewID, oldID int64
	if err := pool.QueryRow(ctx, `SELECT min(id) FROM job WHERE state = 'needs_review'`).Scan(&reviewID); err != nil {
		return err
	}
	pages := func(oldJob int64) []page {
		return []page{
			{"index", "/"}, {"chapter points", "/console/chapters/points"}, {"chapter claim", "/console/chapters/claim"},
			{"queue", "/console/queue"}, {"job (waiting)", fmt.Sprintf("/console/jobs/%d", reviewID)},
			{"job (old, finished)", fmt.Sprintf("/console/jobs/%d", oldJob)}, {"inbox", "/console/inbox"},
			{"outbox", "/console/outbox"}, {"admission", "/console/admission"}, {"sign-in", "/console/signin"},
		}
	}
	checkEmpty, err := timeCheck(ctx, e, tok)
	if err != nil {
		return err
	}
	empty, err := measure(e, tok, pages(reviewID), c.requests)
	if err != nil {
		return err
	}

	fmt.Printf("inserting %d finished jobs (%d events) and %d consumed outbox events …\n", c.jobs, 2*c.jobs, c.events)
	t0 := time.Now()
	if _, err := pool.Exec(ctx, sqlHistoryJobs, c.jobs); err != nil {
		return fmt.Errorf("bench console: history: %w", err)
	}
	if c.events > 0 {
		if _, err := pool.Exec(ctx, sqlHistoryOutbox, c.events); err != nil {
			return fmt.Errorf("bench console: outbox history: %w", err)
		}
		if _, err := pool.Exec(ctx, sqlHistoryConsumer); err != nil {
			return fmt.Errorf("bench console: outbox consumer: %w", err)
		}
	}
	for _, t := range []string{"job", "job_event", "outbox_event", "outbox_consumer"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
	}
	var jobs, finished int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state IN ('succeeded','failed','cancelled')), min(id) FILTER (WHERE business_key LIKE 'hist-%') FROM job`).Scan(&jobs, &finished, &oldID); err != nil {
		return err
	}
	fmt.Printf("inserted in %s: %d jobs, %d finished\n\n", time.Since(t0).Round(time.Second), jobs, finished)
	checkFull, err := timeCheck(ctx, e, tok)
	if err != nil {
		return err
	}
	full, err := measure(e, tok, pages(oldID), c.requests)
	if err != nil {
		return err
	}

	fmt.Printf("%-22s %12s %12s %12s %12s %8s\n", "page", "empty p50", "1M p50", "1M p99", "1M max", "ratio")
	worst, worstP99, worstRatio, worstRatioPage := "", 0.0, 0.0, ""
	for i, p := range pages(oldID) {
		a, b := empty[i], full[i]
		ratio := b.p50 / max(a.p50, 0.001)
		fmt.Printf("%-22s %9.2f ms %9.2f ms %9.2f ms %9.2f ms %7.2fx\n", p.name, a.p50, b.p50, b.p99, b.max, ratio)
		if b.p99 > worstP99 {
			worst, worstP99 = p.name, b.p99
		}
		if ratio > worstRatio {
			worstRatio, worstRatioPage = ratio, p.name
		}
	}
	fmt.Printf("\ninvariant check (background, every invariant; not a page): %.0f ms empty, %.0f ms with the history\n", checkEmpty, checkFull)
	fmt.Printf("RESULT console history_jobs=%d pages=%d worst_page=%q worst_p99_ms=%.2f worst_ratio=%.2f worst_ratio_page=%q under_100ms=%v check_ms_empty=%.0f check_ms_history=%.0f\n",
		finished, len(full), worst, worstP99, worstRatio, worstRatioPage, worstP99 < 100, checkEmpty, checkFull)
	return nil
}

type timing struct{ p50, p99, max float64 }

// measure serves each page n times (after one warm-up request) and
// returns the server times in milliseconds.
func measure(e http.Handler, tok string, pages []page, n int) ([]timing, error) {
	out := make([]timing, len(pages))
	for i, p := range pages {
		var ms []float64
		for j := 0; j <= n; j++ {
			req := httptest.NewRequest(http.MethodGet, p.path, nil)
			req.AddCookie(&http.Cookie{Name: "fencelab_console", Value: tok})
			rec := httptest.NewRecorder()
			t0 := time.Now()
			e.ServeHTTP(rec, req)
			el := time.Since(t0)
			if rec.Code != http.StatusOK {
				return nil, fmt.Errorf("bench console: GET %s answered %d: %s", p.path, rec.Code, trunc(rec.Body.String(), 300))
			}
			if j > 0 {
				ms = append(ms, float64(el)/float64(time.Millisecond))
			}
		}
		slices.Sort(ms)
		out[i] = timing{p50: ms[len(ms)/2], p99: ms[min(len(ms)-1, len(ms)*99/100)], max: ms[len(ms)-1]}
	}
	return out, nil
}

// timeCheck runs every invariant through the console's "Check now".
func timeCheck(ctx context.Context, e http.Handler, tok string) (float64, error) {
	// The CSRF token is on every page; read it from the index.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(&http.Cookie{Name: "fencelab_console", Value: tok})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	_, rest, ok := strings.Cut(string(body), `name="csrf" value="`)
	if !ok {
		return 0, errors.New("bench console: no CSRF token on the index")
	}
	csrf, _, _ := strings.Cut(rest, `"`)
	form := url.Values{"csrf": {csrf}, "back": {"/"}}
	req = httptest.NewRequest(http.MethodPost, "/console/check", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "fencelab_console", Value: tok})
	rec = httptest.NewRecorder()
	t0 := time.Now()
	e.ServeHTTP(rec, req.WithContext(ctx))
	el := time.Since(t0)
	if rec.Code != http.StatusSeeOther {
		return 0, fmt.Errorf("bench console: check answered %d", rec.Code)
	}
	return float64(el) / float64(time.Millisecond), nil
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// sqlLive is the live part of the queue: ready, running and waiting jobs
// of two kinds, with their events.
const sqlLive = `
WITH j AS (
  INSERT INTO job (kind, business_key, state, attempts, fence, owner, lease_until, last_error, due_at)
  SELECT k.kind, 'live-' || k.kind || '-' || s.state || '-' || g, s.state,
         CASE WHEN s.state = 'ready' THEN 0 ELSE 1 END,
         CASE WHEN s.state = 'ready' THEN 0 ELSE 1 END,
         CASE WHEN s.state = 'running' THEN 'worker-1' END,
         CASE WHEN s.state = 'running' THEN now() + interval '1 hour' END,
         CASE WHEN s.state IN ('needs_review', 'unknown') THEN 'the channel neither answered nor can be asked' END,
         now() - g * interval '1 second'
    FROM (VALUES ('workflow'), ('bench.other')) AS k(kind),
         (VALUES ('ready', 100), ('running', 10), ('needs_review', 15), ('unknown', 5)) AS s(state, n),
         LATERAL generate_series(1, s.n) AS g
  RETURNING id, state, fence)
INSERT INTO job_event (job_id, event, fence, owner, state)
SELECT id, 'claimed', 1, 'worker-1', 'running' FROM j WHERE fence = 1`

// sqlHistoryJobs is $1 finished jobs (succeeded, some failed or
// cancelled), each claimed once and finished, spread over the last 30 days.
const sqlHistoryJobs = `
WITH j AS (
  INSERT INTO job (kind, business_key, state, attempts, fence, created_at, updated_at, due_at, result)
  SELECT CASE WHEN g % 3 = 0 THEN 'bench.other' ELSE 'workflow' END, 'hist-' || g,
         CASE WHEN g % 50 = 0 THEN 'failed' WHEN g % 97 = 0 THEN 'cancelled' ELSE 'succeeded' END,
         1, 1, t, t, t, '{"ok":true}'
    FROM generate_series(1, $1::int) AS g,
         LATERAL (SELECT now() - interval '30 days' + (g::float8 / $1) * interval '29 days' AS t) AS ts
  RETURNING id, state, updated_at)
INSERT INTO job_event (job_id, event, fence, owner, state, at)
SELECT id, e.event, 1, 'worker-1', e.st, updated_at
  FROM j, LATERAL (VALUES ('claimed', 'running'), (j.state, j.state)) AS e(event, st)`

// sqlHistoryOutbox is $1 outbox events every consumer has passed.
const sqlHistoryOutbox = `
INSERT INTO outbox_event (topic, key, payload, created_at)
SELECT 'bench.history', 'k-' || (g % 1000), '{"n":1}', now() - interval '1 day'
  FROM generate_series(1, $1::int) AS g`

// sqlHistoryConsumer is a consumer that has passed every history event.
const sqlHistoryConsumer = `
INSERT INTO outbox_consumer (name, topics, position_tx, position_id, processed)
SELECT 'bench-consumer', ARRAY['bench.history'], e.tx_id, e.id, 0
  FROM (SELECT tx_id, id FROM outbox_event WHERE topic = 'bench.history' ORDER BY tx_id DESC, id DESC LIMIT 1) AS e`
