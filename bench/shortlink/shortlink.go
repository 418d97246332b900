// Package shortlink is `fencelab bench shortlink`: cache-hit redirect
// throughput over HTTP on loopback, side by side with GET /healthz of the
// same server in the same run (the ceiling issue 25 holds the redirect to),
// then both again with the clicks table locked by another session (a sick
// stats store, SL-I3). After the run the click writer drains and every 302
// served must be a stored click or a counted drop, exactly once (SL-I4,
// SL-I5), and the module's invariants must hold; the bench fails otherwise.
//
// The server is the real deployable (every module, every middleware, the
// click writer running) built in-process. The load generator is bench/load:
// a fixed pool of keep-alive connections driven closed-loop (as fast as
// answers come), latencies in an HDR histogram. Rounds alternate the two
// routes (and which goes first), so drift on a shared machine hits both
// alike; the ratio reported is the median of the rounds' ratios.
package shortlink

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
)

// target is where the benchmark's link sends the client (never followed).
const target = "https://book.example.test/chapters/short-links"

// Bench is `fencelab bench shortlink`.
var Bench = app.Bench{Name: "shortlink", Summary: "cache-hit redirect throughput against /healthz of the same server (alternating rounds), healthy and with a sick stats store; every click recorded once", Run: Run}

// Run runs the benchmark on the process mods make.
func Run(mods []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench shortlink", flag.ContinueOnError)
	duration := fs.Duration("duration", 3*time.Second, "length of one measured run")
	rounds := fs.Int("rounds", 5, "rounds per phase (≥ 3), each one run of /healthz and one of the redirect, alternating which goes first; medians are reported")
	conns := fs.Int("connections", 64, "keep-alive connections (and closed-loop workers) of the load generator")
	sick := fs.Bool("locked", true, "measure a second phase with the clicks table locked by another session (a sick stats store)")
	accessLog := fs.Bool("access-log", false, "write the access log (to stderr), as serve does by default; off, the figures are the handlers' and middleware's alone")
	shared := setup.Add(fs, "the whole run (server and load generator)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 3 || *conns < 1 || *duration <= 0 {
		return errors.New("bench shortlink: --rounds must be at least 3, --connections and --duration positive")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run, err := shared.Start(ctx)
	if err != nil {
		return err
	}
	defer run.Close()
	srv, url := run.Server, run.URL
	b, err := newBench(ctx, url, mods, *accessLog)
	if err != nil {
		return err
	}
	defer b.close()
	var fsync string
	if err := b.pool.QueryRow(ctx, `SHOW fsync`).Scan(&fsync); err != nil {
		return err
	}
	code, err := b.createLink(ctx)
	if err != nil {
		return err
	}
	b.cpu = newCPUMeter(ctx, b.pool)
	logState := "off"
	if *accessLog {
		logState = "on (stderr)"
	}
	fmt.Printf("fencelab bench shortlink — %s PostgreSQL (fsync=%s), server and load generator in one process on one %d-core machine shared with other work\n",
		srv.Strategy, fsync, runtime.NumCPU())
	fmt.Printf("load: bench/load, %d keep-alive connections, closed loop, %v per run, %d rounds alternating GET /healthz and GET /s/{code} (cache hit); access log %s\n\n",
		*conns, *duration, *rounds, logState)

	routes := [2]string{"/healthz", "/s/" + code}
	before := b.counters()
	healthy, err := b.phase(routes, *rounds, *duration, *conns)
	if err != nil {
		return err
	}
	afterHealthy := b.counters()
	var locked []round
	afterLocked := afterHealthy
	if *sick {
		unlock, err := b.lockClicks(ctx)
		if err != nil {
			return err
		}
		locked, err = b.phase(routes, *rounds, *duration, *conns)
		afterLocked = b.counters()
		unlock()
		if err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tround\tGET /healthz req/s\tGET /s/{code} req/s\tratio\thealthz p99\tredirect p99\thealthz CPU µs/req\tredirect CPU µs/req\t")
	// CPU per request: this process (server and load generator) + PostgreSQL.
	cpuCell := func(self, pg float64) string { return fmt.Sprintf("%.1f + %.1f", self, pg) }
	show := func(phase string, rs []round) {
		for i, r := range rs {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.3f\t%v\t%v\t%s\t%s\t\n", phase, i+1, r.healthz.rate(), r.redirect.rate(), r.ratio(),
				r.healthz.lat.Quantile(0.99), r.redirect.lat.Quantile(0.99),
				cpuCell(r.healthz.selfUs(), r.healthz.pgUs()), cpuCell(r.redirect.selfUs(), r.redirect.pgUs()))
		}
		fmt.Fprintf(tw, "%s\tmedian\t%.0f\t%.0f\t%.3f\t%v\t%v\t%s\t%s\t\n", phase, medianBy(rs, healthzRate), medianBy(rs, redirectRate), medianBy(rs, round.ratio),
			time.Duration(medianBy(rs, healthzP99)), time.Duration(medianBy(rs, redirectP99)),
			cpuCell(medianBy(rs, func(r round) float64 { return r.healthz.selfUs() }), medianBy(rs, func(r round) float64 { return r.healthz.pgUs() })),
			cpuCell(medianBy(rs, func(r round) float64 { return r.redirect.selfUs() }), medianBy(rs, func(r round) float64 { return r.redirect.pgUs() })))
	}
	show("stats healthy", healthy)
	if *sick {
		show("clicks table locked", locked)
	}
	tw.Flush()
	fmt.Println()
	fmt.Printf("stats healthy:       %s\n", afterHealthy.since(before))
	if *sick {
		fmt.Printf("clicks table locked: %s\n", afterLocked.since(afterHealthy))
	}

	// The writer drains its queue and flushes its drop counts when the
	// background tasks stop; only then is every click accounted for.
	b.stopBackground()
	served := b.served.Load()
	st, err := b.clickCounts(ctx, code)
	if err != nil {
		return err
	}
	fmt.Printf("\nclicks: %d redirects served (warm-up included); %d stored (%d rows), %d counted as dropped\n", served, st.clicks, st.rows, st.dropped)
	failed := 0
	if st.clicks+st.dropped != served || st.rows != st.clicks {
		failed++
		fmt.Printf("  FAIL  every 302 is one stored click or one counted drop: served %d, stored %d + dropped %d = %d; rows %d\n",
			served, st.clicks, st.dropped, st.clicks+st.dropped, st.rows)
	} else {
		fmt.Printf("  ok    every 302 is one stored click or one counted drop\n")
	}
	failed += invariant.Print(os.Stdout, b.invariants.Run(ctx, b.pool, "shortlink"))
	verdict := "ok"
	if failed > 0 {
		verdict = "violated"
	}
	fmt.Println()
	kv := []any{"ratio", fmt.Sprintf("%.3f", medianBy(healthy, round.ratio)),
		"redirect_rps", fmt.Sprintf("%.0f", medianBy(healthy, redirectRate)),
		"healthz_rps", fmt.Sprintf("%.0f", medianBy(healthy, healthzRate)),
		"rounds", *rounds, "conns", *conns,
		"redirect_p99_ms", time.Duration(medianBy(healthy, redirectP99)),
		"healthz_p99_ms", time.Duration(medianBy(healthy, healthzP99)),
		"redirect_cpu_us", fmt.Sprintf("%.1f", medianBy(healthy, func(r round) float64 { return r.redirect.selfUs() + r.redirect.pgUs() })),
		"healthz_cpu_us", fmt.Sprintf("%.1f", medianBy(healthy, func(r round) float64 { return r.healthz.selfUs() + r.healthz.pgUs() }))}
	if *sick {
		kv = append(kv, "locked_ratio", fmt.Sprintf("%.3f", medianBy(locked, round.ratio)),
			"locked_redirect_rps", fmt.Sprintf("%.0f", medianBy(locked, redirectRate)))
	}
	kv = append(kv, "clicks_served", served, "clicks_stored", st.clicks, "clicks_dropped", st.dropped, "invariants", verdict)
	load.Result("shortlink", kv...)
	if failed > 0 {
		return fmt.Errorf("bench shortlink: %d checks violated", failed)
	}
	return nil
}

// bench is the in-process server.
type bench struct {
	pool           *pgxpool.Pool
	deps           app.Deps
	invariants     *invariant.Registry
	base           string
	client         *http.Client
	stopBackground func() // stops the click writer after it drained; idempotent
	close          func()
	dbURL          string
	served         atomic.Int64 // 302s the load generator received from /s/{code}
	cpu            cpuMeter
}

func newBench(ctx context.Context, dbURL string, mods []app.Module, accessLog bool) (*bench, error) {
	cfg := app.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.AccessLog = accessLog
	var log *slog.Logger // errors only
	if accessLog {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := setup.StartInProcess(ctx, cfg, mods, setup.InProcessOptions{
		Build: app.BuildOptions{Role: "bench-shortlink", Log: log}, IdleTimeout: 120 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	p.StartBackground() // what serve runs beside HTTP
	return &bench{pool: p.Deps.Pool, deps: p.Deps, invariants: p.Invariants, dbURL: dbURL, base: p.Base,
		client: &http.Client{Timeout: 10 * time.Second}, stopBackground: p.StopBackground, close: p.Close}, nil
}

// createLink makes the benchmark's link over the API.
func (b *bench) createLink(ctx context.Context) (string, error) {
	tok, err := b.deps.Auth.Mint("user-0042", httpx.RoleUser, time.Hour)
	if err != nil {
		return "", err
	}
	body := fmt.Sprintf(`{"target":%q}`, target)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/shortlink/links", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var link struct{ Code string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(raw, &link) != nil {
		return "", fmt.Errorf("create link: %d %s", resp.StatusCode, raw)
	}
	return link.Code, nil
}

// run is one measured run of one route.
type run struct {
	n       int64
	elapsed time.Duration
	lat     *load.Latencies
	cpu     cpuTimes // spent during the run
}

func (r run) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// selfUs and pgUs are the run's CPU per request, in microseconds.
func (r run) selfUs() float64 { return float64(r.cpu.self.Microseconds()) / float64(max(r.n, 1)) }
func (r run) pgUs() float64   { return float64(r.cpu.pg.Microseconds()) / float64(max(r.n, 1)) }

// round is one run of each route on the same machine state.
type round struct{ healthz, redirect run }

func (r round) ratio() float64 { return r.redirect.rate() / r.healthz.rate() }

func healthzRate(r round) float64  { return r.healthz.rate() }
func redirectRate(r round) float64 { return r.redirect.rate() }
func healthzP99(r round) float64   { return float64(r.healthz.lat.Quantile(0.99)) }
func redirectP99(r round) float64  { return float64(r.redirect.lat.Quantile(0.99)) }

// phase warms both routes, then runs rounds of both, alternating which
// goes first so neither always follows the other.
func (b *bench) phase(routes [2]string, rounds int, d time.Duration, conns int) ([]round, error) {
	for _, r := range routes { // warm connections and the cache
		if _, err := b.attack(r, 300*time.Millisecond, conns); err != nil {
			return nil, err
		}
	}
	out := make([]round, rounds)
	for i := range out {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, k := range order {
			m, err := b.attack(routes[k], d, conns)
			if err != nil {
				return nil, err
			}
			if k == 0 {
				out[i].healthz = m
			} else {
				out[i].redirect = m
			}
		}
	}
	return out, nil
}

// attack drives one route closed-loop for d over conns fresh keep-alive
// connections and closes them afterwards (so idle connections from earlier
// runs do not pile up and tax later ones). Every answer must be the
// route's status (200 for /healthz, 302 for the redirect). A request in
// flight when the time is up is finished, not cancelled, so every 302 the
// server served is one the bench counted.
func (b *bench) attack(path string, d time.Duration, conns int) (run, error) {
	client, closeConns := load.Client(conns, 10*time.Second)
	defer closeConns()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	want, redirect := http.StatusOK, strings.HasPrefix(path, "/s/")
	if redirect {
		want = http.StatusFound
	}
	url := b.base + path
	lat := load.NewLatencies()
	cpu0 := b.cpu.read()
	var ok, bad atomic.Int64
	var firstErr atomic.Value
	elapsed := load.ClosedLoop(context.Background(), conns, d, func(context.Context, int) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			bad.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			bad.Add(1)
			firstErr.CompareAndSwap(nil, resp.Status)
			return
		}
		lat.Record(time.Since(start))
		ok.Add(1)
		if redirect {
			b.served.Add(1)
		}
	})
	if n := bad.Load(); n > 0 {
		return run{}, fmt.Errorf("%s: %d answers were not %d (first: %v)", path, n, want, firstErr.Load())
	}
	return run{n: ok.Load(), elapsed: elapsed, lat: lat, cpu: b.cpu.read().minus(cpu0)}, nil
}

// lockClicks takes the clicks table in another session and holds it until
// the returned function is called.
func (b *bench) lockClicks(ctx context.Context) (func(), error) {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `LOCK TABLE shortlink_clicks IN ACCESS EXCLUSIVE MODE`)
	}
	if err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return func() {
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
	}, nil
}

type clickCounts struct{ clicks, dropped, rows int64 }

// clickCounts reads the link's counters and its stored rows (the bench
// runs far below the retention, so nothing was purged).
func (b *bench) clickCounts(ctx context.Context, code string) (clickCounts, error) {
	var c clickCounts
	err := b.pool.QueryRow(ctx, `
SELECT coalesce((SELECT clicks FROM shortlink_click_count WHERE code = $1), 0),
       coalesce((SELECT dropped FROM shortlink_click_count WHERE code = $1), 0),
       (SELECT count(*) FROM shortlink_clicks WHERE code = $1)`, code).Scan(&c.clicks, &c.dropped, &c.rows)
	return c, err
}

// counters are the module's metrics at one moment.
type counters map[string]float64

// counters reads the module's counters.
func (b *bench) counters() counters {
	v := counters{}
	fams, err := b.deps.Metrics.Gather()
	if err != nil {
		return v
	}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "fencelab_shortlink_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key := strings.TrimPrefix(f.GetName(), "fencelab_shortlink_")
			for _, l := range m.GetLabel() {
				key += "{" + l.GetValue() + "}"
			}
			v[key] = m.GetCounter().GetValue()
		}
	}
	return v
}

// since describes what happened between c0 and c.
func (c counters) since(c0 counters) string {
	d := func(k string) float64 { return c[k] - c0[k] }
	return fmt.Sprintf("cache hits %.0f, misses %.0f; clicks written %.0f, dropped %.0f (queue full) + %.0f (write failed); batch retries %.0f",
		d("cache_lookups_total{hit}"), d("cache_lookups_total{miss}"), d("clicks_written_total"),
		d("clicks_dropped_total{queue_full}"), d("clicks_dropped_total{write_failed}"), d("click_batch_retries_total"))
}

// medianBy is the median of f over the rounds.
func medianBy(rs []round, f func(round) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return load.Median(vs)
}
