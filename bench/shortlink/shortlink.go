// Package shortlink is `fencelab bench shortlink`: cache-hit redirect
// throughput and p99 over HTTP on loopback, next to a constant-302 route of
// the same server in the same run (the ceiling), then both again with the
// clicks table locked by another session (a sick stats store).
//
// The server is the real deployable (every module, every middleware, the
// click writer running) built in-process, plus one route only the benchmark
// mounts: GET /bench/const-302. The load generator is vegeta with a fixed
// pool of keep-alive connections, run closed-loop (as fast as answers
// come). Rounds alternate between the two routes so that drift on a shared
// machine hits both alike; the medians are reported.
package shortlink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

const constRoute = "/bench/const-302"

// target is where both routes send the client (it is never followed).
const target = "https://book.example.test/chapters/short-links"

// Run is the command's entry point.
// Bench is `fencelab bench shortlink`.
var Bench = app.Bench{Name: "shortlink", Summary: "redirect throughput and latency against a constant-302 ceiling, healthy and with a sick stats store", Run: Run}

// Run runs the benchmark on the process mods make.
func Run(mods []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench shortlink", flag.ContinueOnError)
	duration := fs.Duration("duration", 3*time.Second, "length of one measured run")
	rounds := fs.Int("rounds", 5, "runs per route and phase (alternating); medians are reported")
	conns := fs.Int("connections", 64, "keep-alive connections (and closed-loop workers) of the load generator")
	dbURL := fs.String("database-url", "", "PostgreSQL to use, only when given (never DATABASE_URL: the dev database stays untouched); default: a fresh local cluster, fsync on, removed afterwards")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (server and load generator) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	srv, err := pgserver.Provision(ctx, *dbURL, pgserver.Options{}) // durable defaults: never Ephemeral
	if err != nil {
		return err
	}
	defer srv.Close()
	url := srv.URL("")
	if err := (pg.Migrator{FS: migrations.FS, URL: url}).Up(); err != nil {
		return err
	}
	b, err := newBench(ctx, url, mods)
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
	fmt.Printf("fencelab bench shortlink — %s PostgreSQL (fsync=%s), server and load generator on one %d-core machine shared with other work\n",
		srv.Strategy, fsync, runtime.NumCPU())
	fmt.Printf("load: vegeta, %d keep-alive connections, closed loop, %v per run, %d rounds alternating routes; access log off\n\n",
		*conns, *duration, *rounds)

	routes := []string{constRoute, "/s/" + code}
	before := b.counters()
	healthy, err := b.phase(routes, *rounds, *duration, *conns)
	if err != nil {
		return err
	}
	afterHealthy := b.counters()
	unlock, err := b.lockClicks(ctx)
	if err != nil {
		return err
	}
	locked, err := b.phase(routes, *rounds, *duration, *conns)
	afterLocked := b.counters()
	unlock()
	if err != nil {
		return err
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\troute\treq/s\tp50\tp99\tof ceiling\t")
	// "of ceiling" is the median of each round's ratio: a redirect run
	// is compared with the constant run just before it, which saw the
	// same machine.
	report := func(phase string, res map[string][]*vegeta.Metrics) {
		ratios := make([]float64, len(res[routes[1]]))
		for i := range ratios {
			ratios[i] = res[routes[1]][i].Throughput / res[routes[0]][i].Throughput
		}
		for i, r := range routes {
			name, ratio := "constant 302 (ceiling)", 1.0
			if i == 1 {
				name, ratio = "GET /s/{code} (cache hit)", medianOf(ratios)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%v\t%v\t%.2f\t\n", phase, name, median(res[r], throughput),
				time.Duration(median(res[r], p50)).Round(time.Microsecond),
				time.Duration(median(res[r], p99)).Round(time.Microsecond), ratio)
		}
	}
	report("stats healthy", healthy)
	report("clicks table locked", locked)
	tw.Flush()
	fmt.Println()
	fmt.Printf("stats healthy:       %s\n", afterHealthy.since(before))
	fmt.Printf("clicks table locked: %s\n", afterLocked.since(afterHealthy))
	ofCeiling := func(res map[string][]*vegeta.Metrics) float64 {
		ratios := make([]float64, len(res[routes[1]]))
		for i := range ratios {
			ratios[i] = res[routes[1]][i].Throughput / res[routes[0]][i].Throughput
		}
		return medianOf(ratios)
	}
	fmt.Println()
	load.Result("shortlink", "connections", *conns, "rounds", *rounds,
		"redirects_per_sec", fmt.Sprintf("%.0f", median(healthy[routes[1]], throughput)),
		"p99_ms", time.Duration(median(healthy[routes[1]], p99)), "of_ceiling", ofCeiling(healthy),
		"locked_redirects_per_sec", fmt.Sprintf("%.0f", median(locked[routes[1]], throughput)),
		"locked_of_ceiling", ofCeiling(locked))
	return nil
}

// bench is the in-process server.
type bench struct {
	pool   *pgxpool.Pool
	deps   app.Deps
	base   string
	client *http.Client
	close  func()
	dbURL  string
}

func newBench(ctx context.Context, dbURL string, mods []app.Module) (*bench, error) {
	cfg := app.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.AccessLog = false
	cfg.TokenSecret = randomHex(32)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	p, err := app.Build(ctx, cfg, mods, app.BuildOptions{Role: "bench-shortlink", Log: log})
	if err != nil {
		return nil, err
	}
	e := p.HTTP()
	// The ceiling: the same server, middleware and router, answering a
	// constant 302 without any lookup or click. Mounted only here.
	e.GET(constRoute, func(c echo.Context) error { return c.Redirect(http.StatusFound, target) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.Close()
		return nil, err
	}
	hs := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	bgCtx, stopBackground := context.WithCancel(ctx)
	waitBackground := p.Background(bgCtx) // what serve runs beside HTTP
	return &bench{pool: p.Deps.Pool, deps: p.Deps, dbURL: dbURL, base: "http://" + ln.Addr().String(), client: &http.Client{Timeout: 10 * time.Second},
		close: func() {
			_ = hs.Close()
			stopBackground()
			waitBackground()
			p.Close()
		}}, nil
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

// phase runs rounds × routes and returns each route's metrics.
func (b *bench) phase(routes []string, rounds int, d time.Duration, conns int) (map[string][]*vegeta.Metrics, error) {
	out := map[string][]*vegeta.Metrics{}
	for _, r := range routes { // warm connections and the cache
		if _, err := b.attack(r, 300*time.Millisecond, conns); err != nil {
			return nil, err
		}
	}
	for range rounds {
		for _, r := range routes {
			m, err := b.attack(r, d, conns)
			if err != nil {
				return nil, err
			}
			out[r] = append(out[r], m)
		}
	}
	return out, nil
}

// attack drives one route closed-loop for d over conns fresh keep-alive
// connections, closes them afterwards (so idle connections from earlier
// runs do not pile up and tax later ones), and checks every answer was a
// 302.
func (b *bench) attack(path string, d time.Duration, conns int) (*vegeta.Metrics, error) {
	client, closeConns := load.Client(conns, 10*time.Second)
	defer closeConns()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(uint64(conns)), vegeta.MaxWorkers(uint64(conns)))
	tgt := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: b.base + path})
	var m vegeta.Metrics
	for res := range atk.Attack(tgt, vegeta.ConstantPacer{}, d, path) {
		m.Add(res)
	}
	m.Close()
	if len(m.StatusCodes) != 1 || m.StatusCodes["302"] == 0 {
		return nil, fmt.Errorf("%s: expected only 302s, got %v (errors: %v)", path, m.StatusCodes, first(m.Errors, 3))
	}
	return &m, nil
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

func throughput(m *vegeta.Metrics) float64 { return m.Throughput }
func p50(m *vegeta.Metrics) float64        { return float64(m.Latencies.P50) }
func p99(m *vegeta.Metrics) float64        { return float64(m.Latencies.P99) }

func median(ms []*vegeta.Metrics, f func(*vegeta.Metrics) float64) float64 {
	vs := make([]float64, len(ms))
	for i, m := range ms {
		vs[i] = f(m)
	}
	return medianOf(vs)
}

func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	return vs[len(vs)/2]
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func randomHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}
