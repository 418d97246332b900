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
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
)

type config struct {
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
	shared := setup.AddServer(fs)
	fs.IntVar(&c.jobs, "jobs", 1_000_000, "finished claim jobs of history to bulk-insert")
	fs.IntVar(&c.events, "outbox-events", 200_000, "consumed outbox events of history to bulk-insert")
	fs.IntVar(&c.requests, "requests", 40, "requests per page and database")
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
	srv, err := shared.Server(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	var urls [2]string
	for i, name := range []string{"empty", "history"} {
		u, drop, err := setup.Scratch(ctx, srv, fmt.Sprintf("fencelab_bench_console_%s_%d", name, os.Getpid()))
		if err != nil {
			return err
		}
		defer func() { _ = drop() }()
		urls[i] = u
	}
	return run(ctx, c, urls, mods)
}

type page struct {
	name string
	path func(side) string
}

// side is one of the two deployables measured side by side.
type side struct {
	name     string
	p        *app.Process
	h        http.Handler
	tok      string // the console session's cookie value
	reviewID int64  // a job waiting for review
	oldID    int64  // the oldest job
}

func run(ctx context.Context, c config, urls [2]string, mods []app.Module) error {
	log := setup.ErrorLog()
	secret := crand.Text()
	var sides [2]*side
	for i, name := range []string{"empty", "history"} {
		cfg := app.Defaults()
		cfg.DatabaseURL = urls[i]
		cfg.AccessLog = false
		cfg.TokenSecret = secret
		p, err := app.Build(ctx, cfg, mods, app.BuildOptions{Role: "bench-console", Log: log})
		if err != nil {
			return err
		}
		defer p.Close()
		tok, err := p.Deps.Auth.Mint("admin-0001", httpx.RoleAdmin, 2*time.Hour)
		if err != nil {
			return err
		}
		// Live rows both databases share: a small queue and jobs waiting
		// for a person, so the pages have something to show.
		if _, err := p.Deps.Pool.Exec(ctx, sqlLive); err != nil {
			return fmt.Errorf("bench console: live rows: %w", err)
		}
		h := p.HTTP()
		session, err := signIn(h, tok)
		if err != nil {
			return err
		}
		sides[i] = &side{name: name, p: p, h: h, tok: session}
	}
	empty, hist := sides[0], sides[1]
	pool := hist.p.Deps.Pool
	var version string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&version); err != nil {
		return err
	}
	fmt.Printf("fencelab bench console — PostgreSQL %s, two deployables side by side (an empty database and one with history), %d requests per page each, alternating; served in-process (server time, no network)\n", version, c.requests)
	fmt.Printf("servers and PostgreSQL share one %d-core machine with other work: figures taken under contention, ratios taken in the same moments\n\n", runtime.NumCPU())

	fmt.Printf("inserting %d finished jobs (%d events) and %d consumed outbox events into the history database …\n", c.jobs, 2*c.jobs, c.events)
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
	var finished int64
	for _, s := range sides {
		for _, t := range []string{"job", "job_event", "outbox_event", "outbox_consumer"} {
			if _, err := s.p.Deps.Pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
				return err
			}
		}
		if err := s.p.Deps.Pool.QueryRow(ctx, `SELECT (SELECT min(id) FROM job_all WHERE state = 'needs_review'), (SELECT min(id) FROM job_all)`).Scan(&s.reviewID, &s.oldID); err != nil {
			return err
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM job_all WHERE state IN ('succeeded', 'failed', 'cancelled')`).Scan(&finished); err != nil {
		return err
	}
	fmt.Printf("inserted in %s: %d finished jobs\n\n", time.Since(t0).Round(time.Second), finished)

	var checks [2]float64
	for i, s := range sides {
		// What the console's background check runs (and "Check now"
		// waits for, up to 20 s).
		t0 := time.Now()
		for _, r := range s.p.Invariants.Run(ctx, s.p.Deps.Pool) {
			if r.Err != nil {
				return fmt.Errorf("bench console: %s on %s: %w", r.ID, s.name, r.Err)
			}
		}
		checks[i] = float64(time.Since(t0)) / float64(time.Millisecond)
	}
	pages := []page{
		{"index", func(side) string { return "/" }},
		{"chapter points", func(side) string { return "/console/chapters/points" }},
		{"chapter claim", func(side) string { return "/console/chapters/claim" }},
		{"queue", func(side) string { return "/console/queue" }},
		{"job (waiting)", func(s side) string { return fmt.Sprintf("/console/jobs/%d", s.reviewID) }},
		{"job (oldest)", func(s side) string { return fmt.Sprintf("/console/jobs/%d", s.oldID) }},
		{"inbox", func(side) string { return "/console/inbox" }},
		{"outbox", func(side) string { return "/console/outbox" }},
		{"admission", func(side) string { return "/console/admission" }},
		{"sign-in", func(side) string { return "/console/signin" }},
	}
	fmt.Printf("%-16s %12s %12s %12s %12s %8s\n", "page", "empty p50", "history p50", "history p99", "history max", "p50 ratio")
	worst, worstP99, worstRatio, worstRatioPage := "", 0.0, 0.0, ""
	for _, p := range pages {
		a, b, err := measure(*empty, *hist, p, c.requests)
		if err != nil {
			return err
		}
		ratio := b.p50 / max(a.p50, 0.001)
		fmt.Printf("%-16s %9.2f ms %9.2f ms %9.2f ms %9.2f ms %7.2fx\n", p.name, a.p50, b.p50, b.p99, b.max, ratio)
		if b.p99 > worstP99 {
			worst, worstP99 = p.name, b.p99
		}
		if ratio > worstRatio {
			worstRatio, worstRatioPage = ratio, p.name
		}
	}
	fmt.Printf("\ninvariant check (background, every invariant; never on a page view): %.0f ms empty, %.0f ms with the history\n", checks[0], checks[1])
	fmt.Printf("RESULT console history_jobs=%d pages=%d worst_p99_page=%q worst_p99_ms=%.2f worst_p50_ratio=%.2f worst_ratio_page=%q check_ms_empty=%.0f check_ms_history=%.0f\n",
		finished, len(pages), worst, worstP99, worstRatio, worstRatioPage, checks[0], checks[1])
	return nil
}

// signIn opens a console session with tok through the sign-in form, as
// a browser does, and returns the session cookie's value (the console
// keeps sessions on the server; the cookie is never the token).
func signIn(h http.Handler, tok string) (string, error) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/signin", nil))
	var pre string
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == "fencelab_console_pre" {
			pre = ck.Value
		}
	}
	form := url.Values{"pre": {pre}, "token": {tok}, "next": {"/"}}
	req := httptest.NewRequest(http.MethodPost, "/console/signin", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "fencelab_console_pre", Value: pre})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == "fencelab_console" && ck.Value != "" {
			return ck.Value, nil
		}
	}
	return "", fmt.Errorf("bench console: sign-in answered %d without a session: %s", rec.Code, trunc(rec.Body.String(), 300))
}

type timing struct{ p50, p99, max float64 }

// measure serves page n times on each side, alternating (after one
// warm-up request each), and returns the server times in milliseconds.
func measure(a, b side, p page, n int) (timing, timing, error) {
	var ms [2][]float64
	for j := 0; j <= n; j++ {
		for i, s := range []side{a, b} {
			path := p.path(s)
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.AddCookie(&http.Cookie{Name: "fencelab_console", Value: s.tok})
			rec := httptest.NewRecorder()
			t0 := time.Now()
			s.h.ServeHTTP(rec, req)
			el := time.Since(t0)
			if rec.Code != http.StatusOK {
				return timing{}, timing{}, fmt.Errorf("bench console: GET %s (%s) answered %d: %s", path, s.name, rec.Code, trunc(rec.Body.String(), 300))
			}
			if j > 0 {
				ms[i] = append(ms[i], float64(el)/float64(time.Millisecond))
			}
		}
	}
	return summarize(ms[0]), summarize(ms[1]), nil
}

func summarize(ms []float64) timing {
	slices.Sort(ms)
	return timing{p50: ms[len(ms)/2], p99: ms[min(len(ms)-1, len(ms)*99/100)], max: ms[len(ms)-1]}
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
  RETURNING id, kind, business_key, state, fence),
keys AS (INSERT INTO job_key (kind, business_key, job_id) SELECT kind, business_key, id FROM j)
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
  RETURNING id, kind, business_key, state, updated_at),
keys AS (INSERT INTO job_key (kind, business_key, job_id) SELECT kind, business_key, id FROM j)
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
