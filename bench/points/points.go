// Package pointsbench is `fencelab bench points`: debits over real HTTP
// against the real deployable, each with a fresh Idempotency-Key, at a given
// concurrency over many accounts; then the one-hot-account case (debits
// and grants on one account from every client: no overdraft, no deadlock);
// then every points, idem and outbox invariant (a violation fails the
// run). PostgreSQL keeps its durable defaults (fsync on).
//
// The server is built in-process (every module, every middleware, access
// log off) on a loopback listener; the load generator is a closed loop of
// keep-alive clients in the same process, so both share the machine with
// PostgreSQL, as pgbench does in bench/points-vs-pgbench.sh. With --rate
// the spread phase is an open loop instead: that many debits per second
// offered, latency measured from each one's due time.
package pointsbench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/points"
)

type config struct {
	url         string
	clients     int
	accounts    int
	duration    time.Duration
	warmup      time.Duration
	hotDuration time.Duration
	hotBalance  int64
	dbConns     int
	shards      int
	seed        uint64
	// rate > 0 offers that many debits per second in the spread phase (an
	// open loop, latency from each request's due time) instead of the
	// closed loop of clients.
	rate float64
}

// Bench is `fencelab bench points`.
var Bench = app.Bench{Name: "points", Summary: "debits over HTTP at a concurrency, then one hot account (bench/points-vs-pgbench.sh sets it beside pgbench)", Run: Run}

// Run runs the benchmark on the process mods make.
func Run(mods []app.Module, args []string) error {
	var c config
	fs := flag.NewFlagSet("bench points", flag.ContinueOnError)
	shared := setup.Add(fs, "the process (server and load generator)")
	fs.IntVar(&c.clients, "clients", 32, "concurrent HTTP clients (closed loop, keep-alive)")
	fs.IntVar(&c.accounts, "accounts", 1000, "user accounts the debits spread over (one owner each)")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "length of the measured spread phase")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before the spread phase")
	fs.DurationVar(&c.hotDuration, "hot-duration", 10*time.Second, "length of the one-hot-account phase (0: skip)")
	fs.Int64Var(&c.hotBalance, "hot-balance", 3000, "the hot account's opening balance (debits of 3, grants of 10: it runs dry under load)")
	fs.IntVar(&c.dbConns, "db-conns", app.Defaults().MaxConns, "the server's database pool (FENCELAB_DB_MAX_CONNS)")
	fs.IntVar(&c.shards, "shards", points.DefaultSystemShards, "system-account shards (FENCELAB_POINTS_SYSTEM_SHARDS; 1 = one hot row)")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed (0: from the clock; printed)")
	fs.Float64Var(&c.rate, "rate", 0, "debits offered per second in the spread phase, whatever the answers' pace (open loop, Poisson arrivals as pgbench --rate makes them, latency from each request's due time, at most 4×clients in flight); 0: the closed loop of --clients")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fencelab bench points [flags]\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.clients < 1 || c.accounts < 1 || c.duration <= 0 || c.dbConns < 1 || c.shards < 1 || c.shards > points.MaxSystemShards || c.hotBalance < 0 {
		return errors.New("bench points: clients, accounts, duration and db-conns must be positive; shards in 1..64")
	}
	if c.rate < 0 || c.rate > 100_000 {
		return errors.New("bench points: --rate must be 0 (closed loop) or a rate up to 100000 per second")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	ctx := context.Background()
	run, err := shared.Start(ctx)
	if err != nil {
		return err
	}
	defer run.Close()
	c.url = run.URL
	b, err := newBench(ctx, c, mods)
	if err != nil {
		return err
	}
	defer b.close()
	return b.run(ctx)
}

type bench struct {
	c      config
	pool   *pgxpool.Pool // the server's
	deps   app.Deps
	svc    *points.Service
	base   string
	client *http.Client
	tag    string // this run's account prefix
	close  func()
	// invariants are the process's registry (app.Build's).
	invariants *invariant.Registry
}

func newBench(ctx context.Context, c config, mods []app.Module) (*bench, error) {
	cfg := app.Defaults()
	cfg.DatabaseURL = c.url
	cfg.AccessLog = false
	cfg.MaxConns = c.dbConns
	cfg.Settings = map[string]string{points.EnvSystemShards: strconv.Itoa(c.shards)}
	p, err := setup.StartInProcess(ctx, cfg, mods, setup.InProcessOptions{Build: app.BuildOptions{Role: "bench-points"}})
	if err != nil {
		return nil, err
	}
	svc, err := points.NewService(p.Deps, points.Config{SystemShards: c.shards})
	if err != nil {
		p.Close()
		return nil, err
	}
	p.StartBackground() // what serve runs beside HTTP
	client, closeClient := load.Client(c.clients, 30*time.Second)
	return &bench{
		c: c, pool: p.Deps.Pool, deps: p.Deps, base: p.Base,
		svc:        svc,
		client:     client,
		tag:        "bench-" + time.Now().Format("150405"),
		invariants: p.Invariants,
		close: func() {
			closeClient()
			p.Close()
		},
	}, nil
}

func (b *bench) run(ctx context.Context) error {
	var fsync, syncCommit, version string
	if err := b.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('server_version')`).
		Scan(&fsync, &syncCommit, &version); err != nil {
		return err
	}
	fmt.Printf("fencelab bench points — PostgreSQL %s (fsync=%s, synchronous_commit=%s), %d clients over HTTP, server pool %d connections, %d system shards, seed %d\n",
		version, fsync, syncCommit, b.c.clients, b.c.dbConns, b.c.shards, b.c.seed)
	fmt.Printf("server, load generator and PostgreSQL share one %d-core machine with other work: figures taken under contention\n\n", runtime.NumCPU())

	ids, tokens, err := b.openAccounts(ctx, b.tag, b.c.accounts, points.MaxAmount)
	if err != nil {
		return err
	}
	spread := func(w int, rng *rand.Rand) (string, string, string, int64) {
		i := rng.IntN(len(ids))
		return "debits", ids[i], tokens[i], 1 + rng.Int64N(10)
	}
	if b.c.warmup > 0 {
		b.load(ctx, b.c.warmup, b.c.rate, spread)
	}
	cpu0 := load.SampleCPU(ctx, b.pool)
	r := b.load(ctx, b.c.duration, b.c.rate, spread)
	cpu := load.SampleCPU(ctx, b.pool).Sub(cpu0)
	if b.c.rate > 0 {
		fmt.Printf("spread: %.0f debits/s offered (open loop, Poisson arrivals, up to %d in flight over %d connections), 1..10 points over %d accounts for %s; %d due while every slot was taken\n",
			b.c.rate, 4*b.c.clients, b.c.clients, b.c.accounts, b.c.duration, r.missed)
	} else {
		fmt.Printf("spread: debits of 1..10 over %d accounts for %s\n", b.c.accounts, b.c.duration)
	}
	r.print()
	spreadRate, spreadP99 := r.rate(http.StatusCreated), r.quantile(0.99)
	// CPU per debit is steadier than throughput on a shared machine: it is
	// what a change in round trips or allocations moves.
	perDebit := func(d time.Duration) string {
		if n := r.total(-1); n > 0 {
			return fmt.Sprintf("%.3f", ms(d)/float64(n))
		}
		return "0"
	}
	pgCPU := "unknown"
	if cpu.PGOK {
		pgCPU = perDebit(cpu.PG)
	}
	fmt.Printf("  CPU per request: %s ms in this process (server and load generator), %s ms in PostgreSQL\n", perDebit(cpu.Process), pgCPU)

	if b.c.hotDuration > 0 {
		if err := b.hot(ctx); err != nil {
			return err
		}
	}

	fmt.Println("\ninvariants after the run:")
	// Every module the debits went through: the ledger (PTS-I*), the
	// idempotency records (IDEM-I*) and the outbox events (OUTBOX-I*).
	failed := invariant.Print(os.Stdout, b.invariants.Run(ctx, b.pool, "points", "idem", "outbox"))
	verdict := "ok"
	if failed > 0 {
		verdict = "violated"
	}
	fmt.Println()
	load.Result("points", "clients", b.c.clients, "accounts", b.c.accounts, "duration", b.c.duration.String(),
		"offered_per_sec", fmt.Sprintf("%.0f", b.c.rate), "missed", r.missed,
		"debits_per_sec", fmt.Sprintf("%.0f", spreadRate), "p50_ms", r.quantile(0.5), "p99_ms", spreadP99,
		"errors", r.errors(), "cpu_ms_per_debit", perDebit(cpu.Process), "pg_cpu_ms_per_debit", pgCPU, "invariants", verdict)
	if failed > 0 {
		return fmt.Errorf("bench points: %d invariants violated", failed)
	}
	return nil
}

// openAccounts creates n accounts owned by one user each and grants each
// balance points through the service (so the ledger stays balanced), and
// mints their owners' tokens.
func (b *bench) openAccounts(ctx context.Context, prefix string, n int, balance int64) (ids, tokens []string, err error) {
	start := time.Now()
	for i := range n {
		id, owner := fmt.Sprintf("%s-%05d", prefix, i), fmt.Sprintf("%s-user-%05d", prefix, i)
		if _, err := b.svc.CreateAccount(ctx, b.pool, points.CreateAccountRequest{ID: id, Owner: owner}); err != nil {
			return nil, nil, err
		}
		for left := balance; left > 0; left -= points.MaxAmount {
			err := pg.InTx(ctx, b.pool, func(tx pgx.Tx) error {
				_, err := b.svc.Grant(ctx, tx, "bench", crand.Text(), id, points.PostingRequest{Amount: min(left, points.MaxAmount), Reason: "bench opening"})
				return err
			})
			if err != nil {
				return nil, nil, err
			}
		}
		tok, err := b.deps.Auth.Mint(owner, httpx.RoleUser, 24*time.Hour)
		if err != nil {
			return nil, nil, err
		}
		ids, tokens = append(ids, id), append(tokens, tok)
	}
	fmt.Printf("opened %d accounts of %d points each in %s\n", n, balance, time.Since(start).Round(time.Millisecond))
	return ids, tokens, nil
}

// hot runs the one-hot-account case: every client posts to one account,
// nine debits of 3 for each grant of 10, so it runs dry while under load.
// Success means: no 5xx (a deadlock would surface as a 503 retry), no
// transport error, and a final balance that is exactly the opening balance
// plus the granted minus the debited points, never negative.
func (b *bench) hot(ctx context.Context) error {
	ids, tokens, err := b.openAccounts(ctx, b.tag+"-hot", 1, b.c.hotBalance)
	if err != nil {
		return err
	}
	admin, err := b.deps.Auth.Mint("bench-admin", httpx.RoleAdmin, 24*time.Hour)
	if err != nil {
		return err
	}
	r := b.load(ctx, b.c.hotDuration, 0, func(w int, rng *rand.Rand) (string, string, string, int64) {
		if rng.IntN(10) == 0 {
			return "grants", ids[0], admin, 10
		}
		return "debits", ids[0], tokens[0], 3
	})
	a, err := b.svc.Account(ctx, httpx.Principal{Subject: "bench-admin", Role: httpx.RoleAdmin}, ids[0])
	if err != nil {
		return err
	}
	debited, granted := r.count("debits", http.StatusCreated), r.count("grants", http.StatusCreated)
	want := b.c.hotBalance + 10*int64(granted) - 3*int64(debited)
	fmt.Printf("\none hot account (opening %d; 9 debits of 3 : 1 grant of 10) for %s\n", b.c.hotBalance, b.c.hotDuration)
	r.print()
	fmt.Printf("  final balance %d = %d + 10×%d − 3×%d: %v; negative: %v; insufficient_balance refusals: %d\n",
		a.Balance, b.c.hotBalance, granted, debited, a.Balance == want, a.Balance < 0, r.count("debits", http.StatusConflict))
	if a.Balance != want || a.Balance < 0 || r.errors() > r.count("debits", http.StatusConflict) {
		return fmt.Errorf("bench points: hot account: balance %d, want %d; %d unexpected answers", a.Balance, want, r.errors()-r.count("debits", http.StatusConflict))
	}
	return nil
}

// pick chooses one request: route kind ("debits" or "grants"), account,
// token and amount.
type pick func(worker int, rng *rand.Rand) (kind, account, token string, amount int64)

// result is one phase: answers counted by route kind and status (0: a
// transport error), latencies in the harness's histogram.
type result struct {
	counts  map[string]map[int]int
	lat     *load.Latencies
	elapsed time.Duration
	missed  int // open loop: requests due while every slot was taken
}

// load runs one phase for d, each request with a fresh idempotency key:
// with rate 0 the closed loop (every client sends its next request as
// soon as the previous one is answered, latency from its send), else the
// open loop at that rate (latency from each request's due time).
func (b *bench) load(ctx context.Context, d time.Duration, rate float64, next pick) result {
	r := result{counts: map[string]map[int]int{}, lat: load.NewLatencies()}
	var mu sync.Mutex
	send := func(ctx context.Context, w int, rng *rand.Rand, from time.Time) {
		kind, id, tok, amount := next(w, rng)
		status := b.post(kind, id, tok, amount)
		if ctx.Err() != nil && status == 0 {
			return // cut off by the end of the phase, not an error
		}
		r.lat.Record(time.Since(from))
		mu.Lock()
		defer mu.Unlock()
		if r.counts[kind] == nil {
			r.counts[kind] = map[int]int{}
		}
		r.counts[kind][status]++
	}
	if rate > 0 {
		arrivals := rand.New(rand.NewPCG(b.c.seed, ^uint64(0)))
		r.elapsed, r.missed = load.OpenLoop(ctx, rate, d, 4*b.c.clients, arrivals, func(ctx context.Context, i int, due time.Time) {
			send(ctx, i%b.c.clients, rand.New(rand.NewPCG(b.c.seed, uint64(i))), due)
		})
		return r
	}
	rngs := make([]*rand.Rand, b.c.clients)
	for w := range b.c.clients {
		rngs[w] = rand.New(rand.NewPCG(b.c.seed, uint64(w)))
	}
	r.elapsed = load.ClosedLoop(ctx, b.c.clients, d, func(ctx context.Context, w int) {
		send(ctx, w, rngs[w], time.Now())
	})
	return r
}

// post sends one debit or grant and returns its status (0 on a transport
// error). It does not use the phase's context: a request in flight at the
// end of the phase finishes and counts.
func (b *bench) post(kind, id, tok string, amount int64) int {
	body := `{"amount":` + strconv.FormatInt(amount, 10) + `,"reason":"bench"}`
	req, err := http.NewRequest(http.MethodPost, b.base+"/points/accounts/"+id+"/"+kind, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set(idem.Header, crand.Text()) // fresh key: every request is a new debit
	resp, err := b.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (r result) count(kind string, status int) int { return r.counts[kind][status] }

// total counts answers with status (any kind; -1: every answer).
func (r result) total(status int) int {
	n := 0
	for _, byStatus := range r.counts {
		for s, k := range byStatus {
			if status == -1 || s == status {
				n += k
			}
		}
	}
	return n
}

// rate is answers with status per second.
func (r result) rate(status int) float64 { return float64(r.total(status)) / r.elapsed.Seconds() }

// errors counts answers other than 201.
func (r result) errors() int { return r.total(-1) - r.total(http.StatusCreated) }

func (r result) quantile(q float64) time.Duration { return r.lat.Quantile(q) }

func (r result) print() {
	statuses := map[int]int{}
	for _, byStatus := range r.counts {
		for s, k := range byStatus {
			statuses[s] += k
		}
	}
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var sb bytes.Buffer
	for _, c := range codes {
		name := strconv.Itoa(c)
		if c == 0 {
			name = "transport error"
		}
		fmt.Fprintf(&sb, " %s×%d", name, statuses[c])
	}
	all := r.total(-1)
	fmt.Printf("  %d requests in %s: %.0f req/s, %.0f created/s; latency p50 %.2f ms, p99 %.2f ms, max %.2f ms;%s\n",
		all, r.elapsed.Round(time.Millisecond), float64(all)/r.elapsed.Seconds(), r.rate(http.StatusCreated),
		ms(r.quantile(0.5)), ms(r.quantile(0.99)), ms(r.quantile(1)), sb.String())
}

func ms(d time.Duration) float64 { return load.Ms(d) }
