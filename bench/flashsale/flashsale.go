// Package flashsale is `fencelab bench flashsale`: N buyers, each with its
// own keep-alive connection, press "buy" at the same instant on 40 units.
// It reports the time to sell out, p50/p99 of accepted and refused
// answers, the 503s, and the invariants afterwards.
//
// The server is the real deployable (every module and middleware, the
// reservation limiter at its configured L and W) built in-process on a
// loopback listener, against durable PostgreSQL (fsync on). Each buyer is
// a goroutine with its own http.Transport and connection, opened before
// the start (a sale's buyers are on the page when it opens), so the
// figures measure answering, not TCP handshakes. A buyer whose answer is
// 503 waits as Retry-After says (plus up to 50% jitter, or --backoff) and
// sends the same request key again, until it gets 201 or 409.
package flashsale

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// Bench is `fencelab bench flashsale`.
var Bench = app.Bench{Name: "flashsale", Summary: "hundreds of buyers press buy at once: no oversell, time to sell out, 409/503 latencies", Run: Run}

// Run runs the benchmark on the process mods make.
func Run(mods []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench flashsale", flag.ContinueOnError)
	clients := fs.Int("clients", 500, "buyers, each its own connection, all pressing buy at once")
	units := fs.Int("units", 40, "units on sale in each run")
	runs := fs.Int("runs", 3, "sales to run (a fresh SKU and fresh buyers each)")
	limit := fs.Int("limit", reserve.DefaultConfig().Limit, "reservation operations in the database at once (FENCELAB_FLASHSALE_LIMIT)")
	waitLine := fs.Int("wait-line", reserve.DefaultConfig().WaitLine, "bounded wait line (FENCELAB_FLASHSALE_WAIT_LINE)")
	backoff := fs.Duration("backoff", 0, "a 503'd buyer waits this (±50%) before retrying; 0: as Retry-After says, plus up to 50%")
	shared := setup.Add(fs, "the whole run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *clients < 1 || *units < 1 || *runs < 1 {
		return errors.New("--clients, --units and --runs must be positive")
	}
	nofile, err := raiseNoFile(uint64(2**clients + 1000))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run, err := shared.Start(ctx)
	if err != nil {
		return err
	}
	defer run.Close()
	srv, url := run.Server, run.URL
	b, err := newBench(ctx, url, mods, map[string]string{
		reserve.EnvLimit: strconv.Itoa(*limit), reserve.EnvWaitLine: strconv.Itoa(*waitLine),
	})
	if err != nil {
		return err
	}
	defer b.close()
	var fsync, syncCommit string
	if err := b.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		return err
	}
	fmt.Printf("fencelab bench flashsale — %s PostgreSQL (fsync=%s, synchronous_commit=%s); server and %d buyers in one process on a %d-core machine shared with other work\n",
		srv.Strategy, fsync, syncCommit, *clients, runtime.NumCPU())
	retry := "Retry-After + up to 50% jitter"
	if *backoff > 0 {
		retry = fmt.Sprintf("%v ±50%%", *backoff)
	}
	fmt.Printf("sale: %d units; admission limit %d, wait line %d; %d pre-opened keep-alive connections (RLIMIT_NOFILE %d); a 503'd buyer retries its key after %s\n\n",
		*units, *limit, *waitLine, *clients, nofile, retry)

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tsold out in\tall answered\tholds\t409\t503\trequests\taccepted p50\tp99\trefused p50\tp99\t409 p99\t503 p99\tserver: accepted p99\trefused p99\tpeak in db\tinvariants\t")
	var failures []string
	soldOut, accepted, refused := load.NewLatencies(), load.NewLatencies(), load.NewLatencies()
	for run := 1; run <= *runs; run++ {
		res, err := b.sale(ctx, run, *clients, *units, *backoff)
		if err != nil {
			return err
		}
		inv := "hold"
		if len(res.violations) > 0 {
			inv = "VIOLATED"
			failures = append(failures, res.violations...)
		}
		soldOut.Record(res.soldOut)
		accepted.Merge(load.Of(res.accepted))
		refused.Merge(load.Of(res.refused))
		if res.holds != *units {
			failures = append(failures, fmt.Sprintf("run %d: %d holds in the database, want %d", run, res.holds, *units))
		}
		fmt.Fprintf(tw, "%d\t%v\t%v\t%d\t%d\t%d\t%d\t%v\t%v\t%v\t%v\t%v\t%v\t%v\t%v\t%d\t%s\t\n", run,
			ms(res.soldOut), ms(res.allDone), res.holds, res.count409, res.count503, res.requests,
			ms(pct(res.accepted, 50)), ms(pct(res.accepted, 99)), ms(pct(res.refused, 50)), ms(pct(res.refused, 99)),
			ms(pct(res.conflict, 99)), ms(pct(res.overloaded, 99)),
			ms(pct(res.serverAccepted, 99)), ms(pct(res.serverRefused, 99)), res.peakInDB, inv)
	}
	tw.Flush()
	fmt.Println()
	fmt.Println("sold out in: start → the last unit's 201 reached its buyer. all answered: start → every buyer has 201 or 409.")
	fmt.Println("accepted: 201 answers; refused: every 409 and 503 answer (each attempt is one sample); latency is per HTTP request on its open connection, as the buyer saw it.")
	fmt.Println("server: the same requests timed inside the server (handler start → last byte written), without kernel queues and the load generator's scheduling.")
	fmt.Println("peak in db: most reservation operations inside the database at once, counted server-side around the hold (FS-R4: ≤ limit).")
	verdict := "ok"
	if len(failures) > 0 {
		verdict = "violated"
	}
	fmt.Println()
	load.Result("flashsale", "clients", *clients, "units", *units, "runs", *runs,
		"sold_out_p50_ms", soldOut.Quantile(0.5), "accepted_p99_ms", accepted.Quantile(0.99),
		"refused_p99_ms", refused.Quantile(0.99), "invariants", verdict)
	if len(failures) > 0 {
		return fmt.Errorf("flashsale bench: %s", strings.Join(failures, "; "))
	}
	return nil
}

// bench is the in-process server.
type bench struct {
	pool   *pgxpool.Pool
	deps   app.Deps
	server *serverTimes
	base   string
	close  func()
	// invariants are the process's registry (app.Build's).
	invariants *invariant.Registry
}

// serverTimes records how long the server took over each reservation
// request, from the handler's start to its last byte written: the
// server's share of a latency, without the kernel queues and the
// scheduling of a machine shared with the load generator.
type serverTimes struct {
	mu       sync.Mutex
	refused  []time.Duration
	accepted []time.Duration
}

func (st *serverTimes) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/flashsale/reservations" {
			h.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		t0 := time.Now()
		h.ServeHTTP(rec, r)
		took := time.Since(t0)
		st.mu.Lock()
		if rec.status == http.StatusCreated {
			st.accepted = append(st.accepted, took)
		} else {
			st.refused = append(st.refused, took)
		}
		st.mu.Unlock()
	})
}

// take returns and forgets what was recorded.
func (st *serverTimes) take() (accepted, refused []time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	accepted, refused = st.accepted, st.refused
	st.accepted, st.refused = nil, nil
	return accepted, refused
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func newBench(ctx context.Context, dbURL string, mods []app.Module, settings map[string]string) (*bench, error) {
	cfg := app.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.AccessLog = false
	cfg.Workers = 0 // no background jobs: the release must not run during a sale
	cfg.Settings = settings
	st := &serverTimes{}
	p, err := setup.StartInProcess(ctx, cfg, mods, setup.InProcessOptions{
		Build: app.BuildOptions{Role: "bench-flashsale", MinConns: int32(cfg.MaxConns)},
		Wrap:  st.wrap, IdleTimeout: 5 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	p.StartBackground() // what serve runs beside HTTP (Workers = 0: no jobs)
	return &bench{pool: p.Deps.Pool, deps: p.Deps, invariants: p.Invariants, server: st, base: p.Base, close: p.Close}, nil
}

// result is one sale's figures.
type result struct {
	soldOut, allDone                        time.Duration
	accepted, refused, conflict, overloaded []time.Duration
	serverAccepted, serverRefused           []time.Duration
	count409, count503, requests, holds     int
	peakInDB                                int
	violations                              []string
}

// buyer is one client: its own connection, token and request key.
type buyer struct {
	client *http.Client
	token  string
	body   []byte
}

// sample is one HTTP attempt.
type sample struct {
	status     int
	code       string
	retryAfter int
	took       time.Duration
	at         time.Duration // since the start, when the answer arrived
}

func (b *bench) sale(ctx context.Context, run, clients, units int, backoff time.Duration) (result, error) {
	sku := fmt.Sprintf("sku-bench-%d-%s", run, randomHex(4))
	if _, err := b.pool.Exec(ctx, `INSERT INTO flashsale_sku (sku, total, available) VALUES ($1, $2, $2)`, sku, units); err != nil {
		return result{}, err
	}
	buyers, err := b.buyers(ctx, run, clients, sku)
	if err != nil {
		return result{}, err
	}
	defer func() {
		for _, by := range buyers {
			by.client.CloseIdleConnections()
		}
	}()
	runtime.GC() // start every sale from the same heap
	b.server.take()

	samples := make([][]sample, clients)
	errs := make([]error, clients)
	gate := make(chan struct{})
	var ready, done sync.WaitGroup
	var start time.Time
	for i, by := range buyers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			for {
				s, err := by.send(ctx, b.base, start)
				if err != nil {
					errs[i] = err
					return
				}
				samples[i] = append(samples[i], s)
				if s.status != http.StatusServiceUnavailable {
					return
				}
				wait := time.Duration(max(s.retryAfter, 1)) * time.Second
				wait += time.Duration(mrand.Int64N(int64(wait / 2)))
				if backoff > 0 {
					wait = backoff/2 + time.Duration(mrand.Int64N(int64(backoff)))
				}
				time.Sleep(wait)
			}
		}()
	}
	ready.Wait()
	start = time.Now()
	close(gate)
	done.Wait()
	allDone := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}

	res := result{allDone: allDone}
	res.serverAccepted, res.serverRefused = b.server.take()
	var acceptedAt []time.Duration
	for _, ss := range samples {
		for _, s := range ss {
			res.requests++
			switch s.status {
			case http.StatusCreated:
				res.accepted = append(res.accepted, s.took)
				acceptedAt = append(acceptedAt, s.at)
			case http.StatusConflict:
				res.count409++
				res.refused = append(res.refused, s.took)
				res.conflict = append(res.conflict, s.took)
			case http.StatusServiceUnavailable:
				res.count503++
				res.refused = append(res.refused, s.took)
				res.overloaded = append(res.overloaded, s.took)
			default:
				return result{}, fmt.Errorf("unexpected answer %d %s", s.status, s.code)
			}
		}
	}
	if len(acceptedAt) > 0 {
		res.soldOut = slices.Max(acceptedAt)
	}
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM flashsale_reservation WHERE sku = $1 AND state = 'HELD'`, sku).Scan(&res.holds); err != nil {
		return result{}, err
	}
	res.peakInDB = int(b.gauge("fencelab_flashsale_reservation_ops_in_db_peak"))
	for _, r := range b.invariants.Run(ctx, b.pool, reserve.Module) {
		if !r.Holds() {
			var sb strings.Builder
			invariant.Format(&sb, r)
			res.violations = append(res.violations, sb.String())
		}
	}
	return res, nil
}

// buyers opens one connection per buyer before the sale starts.
func (b *bench) buyers(ctx context.Context, run, n int, sku string) ([]*buyer, error) {
	out := make([]*buyer, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 256) // open connections a few hundred at a time: no SYN backlog overflow
	var wg sync.WaitGroup
	for i := range n {
		user := fmt.Sprintf("user-r%d-%05d", run, i+1)
		tok, err := b.deps.Auth.Mint(user, httpx.RoleUser, time.Hour)
		if err != nil {
			return nil, err
		}
		body, _ := json.Marshal(reserve.ReserveRequest{SKU: sku, RequestKey: fmt.Sprintf("bench-%s-%05d", sku, i+1)})
		tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true, IdleConnTimeout: 5 * time.Minute}
		out[i] = &buyer{client: &http.Client{Transport: tr, Timeout: time.Minute}, token: tok, body: body}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/healthz", nil)
			resp, err := out[i].client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (by *buyer) send(ctx context.Context, base string, start time.Time) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/flashsale/reservations", bytes.NewReader(by.body))
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+by.token)
	t0 := time.Now()
	resp, err := by.client.Do(req)
	if err != nil {
		return sample{}, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	now := time.Now()
	if err != nil {
		return sample{}, err
	}
	s := sample{status: resp.StatusCode, took: now.Sub(t0), at: now.Sub(start)}
	s.retryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	var p struct{ Code string }
	_ = json.Unmarshal(raw, &p)
	s.code = p.Code
	if s.status == http.StatusConflict && s.code != "sold_out" {
		return sample{}, fmt.Errorf("unexpected 409 %s", raw)
	}
	return s, nil
}

// gauge reads a gauge of the server's registry.
func (b *bench) gauge(name string) float64 {
	fams, err := b.deps.Metrics.Gather()
	if err != nil {
		return -1
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// raiseNoFile lifts RLIMIT_NOFILE to at least want (up to the hard limit,
// or beyond it when the process may): every buyer holds one client and one
// server socket.
func raiseNoFile(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	next := lim
	next.Cur = max(want, min(lim.Max, want))
	if next.Max < next.Cur {
		next.Max = next.Cur // needs CAP_SYS_RESOURCE
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		return lim.Cur, fmt.Errorf("%d buyers need about %d file descriptors; RLIMIT_NOFILE is %d (hard %d) and cannot be raised: %w",
			want/2, want, lim.Cur, lim.Max, err)
	}
	return next.Cur, nil
}

// pct is the p-th percentile of ds, from the harness's histogram.
func pct(ds []time.Duration, p int) time.Duration { return load.Of(ds).Quantile(float64(p) / 100) }

// ms rounds a duration for the table.
func ms(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func randomHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}
