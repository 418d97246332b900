// Package hostilebench is `fencelab bench hostile`: the memory ceiling of
// a server under hostile bodies. Concurrent clients send worst-case JSON
// bodies at the body limit (nested past any depth, wide, one long string,
// many keys, each at the top level and inside the free-form fields) to
// every route that takes a body, for a duration, and the bench reports the
// server's peak resident memory, the latency quantiles and the statuses.
//
// The server is `fencelab serve`, run as a child process on a fresh local
// cluster, so its peak RSS (VmHWM in /proc/PID/status) is its own and not
// the load generator's. The goal it is held to: peak RSS under 256 MB and
// every request answered, none with a 5xx.
package hostilebench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/bench/load"
	"github.com/fencelab/fencelab/bench/setup"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

// Bench is `fencelab bench hostile`.
var Bench = app.Bench{Name: "hostile", Summary: "worst-case bodies at the body limit on every route that takes one: the server's peak RSS, p99, statuses", Run: Run}

// GoalRSSMB is the ceiling the server's peak RSS is held to.
const GoalRSSMB = 256

type config struct {
	server   string
	clients  int
	duration time.Duration
	bodySize int
}

// Run runs the benchmark; mods give the routes (the server is the binary).
func Run(mods []app.Module, args []string) error {
	var c config
	fs := flag.NewFlagSet("bench hostile", flag.ContinueOnError)
	shared := setup.Add(fs, "")
	fs.StringVar(&c.server, "server", "", "the fencelab binary run as `serve` (default: this executable)")
	fs.IntVar(&c.clients, "clients", 16, "concurrent clients (closed loop)")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "how long the bodies are sent")
	fs.IntVar(&c.bodySize, "body-size", 1_000_000-64, "size of each body in bytes (just under the JSON body limit, httpx.DefaultBodyLimit \"1M\": 1,000,000 bytes)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fencelab bench hostile [flags]\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.clients < 1 || c.duration <= 0 || c.bodySize < 1024 {
		return errors.New("bench hostile: clients and duration must be positive, body-size at least 1024")
	}
	if c.server == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		c.server = exe
	}
	ctx := context.Background()
	srv, url, err := shared.Database(ctx) // durable defaults, as every bench
	if err != nil {
		return err
	}
	defer srv.Close()
	s, err := startServer(c, url)
	if err != nil {
		return err
	}
	defer s.stop()
	return run(ctx, c, mods, s)
}

// server is the `fencelab serve` child.
type server struct {
	*setup.Serve
	auth   *httpx.Auth
	dir    string
	dbURL  string
	secret string
}

func startServer(c config, dbURL string) (*server, error) {
	addr, err := setup.LoopbackAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelab-bench-hostile-")
	if err != nil {
		return nil, err
	}
	secret := crand.Text()
	auth, err := httpx.NewAuth([]byte(secret))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.server, "serve", "--addr", addr, "--database-url", dbURL, "--data-dir", filepath.Join(dir, "data"),
		"--access-log=false", "--log-level", "error")
	cmd.Dir = dir // no .fencelab/env of the caller's directory is read
	cmd.Env = append(os.Environ(), "FENCELAB_TOKEN_SECRET="+secret)
	cmd.Stdout = io.Discard
	child, err := setup.StartServe(cmd, addr, http.DefaultClient, 100*time.Millisecond)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench hostile: %w", err)
	}
	return &server{Serve: child, auth: auth, dir: dir, dbURL: dbURL, secret: secret}, nil
}

func (s *server) stop() {
	s.Stop()
	_ = os.RemoveAll(s.dir)
}

// route is one route that takes a body, with the token that gets past its
// authentication (so the body reaches the decoder).
type route struct {
	method, path, token string
}

// freeForm are the members the API takes as free-form JSON (a notify
// event's data, a workflow's input, a file's metadata) and a string every
// post has: a worst-case value is sent at the top level and under each.
var freeForm = []string{"", "data", "input", "metadata", "body"}

// Bodies are the worst cases at size n bytes, by name.
func Bodies(n int) map[string][]byte {
	wrap := func(member string, v func(n int) string) []byte {
		if member == "" {
			return []byte(v(n))
		}
		open := `{"` + member + `":`
		return []byte(open + v(n-len(open)-1) + `}`)
	}
	shapes := map[string]func(n int) string{
		"deep":        func(n int) string { return strings.Repeat("[", n/2) + strings.Repeat("]", n/2) },
		"deep object": func(n int) string { d := n / 6; return strings.Repeat(`{"a":`, d) + "1" + strings.Repeat("}", d) },
		"wide":        func(n int) string { return "[" + strings.Repeat("1,", n/2-1) + "1]" },
		"wide objects": func(n int) string {
			return "[" + strings.Repeat(`{"a":1},`, n/8-1) + `{"a":1}]`
		},
		"long string": func(n int) string { return `"` + strings.Repeat("x", n-2) + `"` },
		"many keys": func(n int) string {
			var b strings.Builder
			b.WriteByte('{')
			for i := 0; b.Len() < n-16; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `"k%d":1`, i)
			}
			b.WriteByte('}')
			return b.String()
		},
	}
	out := map[string][]byte{}
	for name, shape := range shapes {
		for _, m := range freeForm {
			key := name
			if m != "" {
				key += " in " + m
			}
			out[key] = wrap(m, shape)
		}
	}
	return out
}

func plausible(path, param string) string {
	switch {
	case strings.HasPrefix(path, "/upload/") && param == "id":
		return "00000000-0000-4000-8000-000000000001"
	case param == "n":
		return "0"
	case param == "code":
		return "abc123"
	case param == "sku":
		return "sku-1"
	case strings.HasPrefix(path, "/social/users/") || strings.HasPrefix(path, "/notify/users/"):
		return "user-0001"
	case strings.HasPrefix(path, "/points/accounts/"):
		return "acct-0001"
	}
	return "1"
}

// routes lists every route of mods that takes a body (the HTML console
// aside), each with the first token its authentication lets through.
func routes(ctx context.Context, mods []app.Module, s *server, client *http.Client) ([]route, error) {
	// The routes as the process mounts them: a process is built (on the
	// bench's database) only to read its router.
	cfg := app.Defaults()
	cfg.DatabaseURL, cfg.TokenSecret = s.dbURL, s.secret
	p, err := app.Build(ctx, cfg, mods, app.BuildOptions{Role: "bench-hostile", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	e := echo.New()
	for _, m := range p.Mods {
		if m.Routes != nil {
			m.Routes(e)
		}
	}
	var tokens []string
	for _, who := range []struct {
		sub  string
		role httpx.Role
	}{{"user-0001", httpx.RoleUser}, {"admin-0001", httpx.RoleAdmin}, {"svc-0001", httpx.RoleService}} {
		tok, err := s.auth.Mint(who.sub, who.role, time.Hour)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, tok)
	}
	var out []route
	for _, r := range e.Routes() {
		if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
			continue
		}
		if r.Path == "/" || strings.HasPrefix(r.Path, "/console") {
			continue
		}
		parts := strings.Split(r.Path, "/")
		for i, p := range parts {
			if strings.HasPrefix(p, ":") {
				parts[i] = plausible(r.Path, p[1:])
			}
		}
		rt := route{method: r.Method, path: strings.Join(parts, "/"), token: tokens[0]}
		for _, tok := range tokens {
			st, _, err := send(ctx, client, s.Base, route{r.Method, rt.path, tok}, []byte(`{}`), "probe")
			if err != nil {
				return nil, err
			}
			if st != http.StatusUnauthorized && st != http.StatusForbidden {
				rt.token = tok
				break
			}
		}
		out = append(out, rt)
	}
	slices.SortFunc(out, func(a, b route) int { return strings.Compare(a.path+a.method, b.path+b.method) })
	return out, nil
}

func send(ctx context.Context, client *http.Client, base string, r route, body []byte, key string) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set(idem.Header, key)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(start), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

func run(ctx context.Context, c config, mods []app.Module, s *server) error {
	client, closeClient := load.Client(c.clients, 60*time.Second)
	defer closeClient()
	rts, err := routes(ctx, mods, s, client)
	if err != nil {
		return err
	}
	bodies := Bodies(c.bodySize)
	names := make([]string, 0, len(bodies))
	for n := range bodies {
		names = append(names, n)
	}
	slices.Sort(names)
	idle, err := s.StatusKB("VmRSS")
	if err != nil {
		return err
	}
	fmt.Printf("fencelab bench hostile — %d clients, %d routes that take a body, %d bodies of %d bytes (%s), %s, server: `fencelab serve` (pid %d, RSS %.1f MB idle)\n",
		c.clients, len(rts), len(bodies), c.bodySize, strings.Join(names, ", "), c.duration, s.Cmd.Process.Pid, float64(idle)/1024)
	fmt.Printf("server, load generator and PostgreSQL share one %d-core machine with other work: figures taken under contention\n\n", runtime.NumCPU())

	type tally struct {
		lat      *load.Latencies
		statuses map[int]int
		failed   int
		firstErr error
		slowest  time.Duration
		slowWhat string
	}
	tallies := make([]tally, c.clients)
	var peakRSS int64
	stopSampling := load.Every(ctx, 100*time.Millisecond, func(context.Context) { // the RSS over time, beside VmHWM (the kernel's own peak)
		if kb, err := s.StatusKB("VmRSS"); err == nil {
			peakRSS = max(peakRSS, kb)
		}
	})
	elapsed := load.ClosedLoop(ctx, c.clients, c.duration, func(ctx context.Context, w int) {
		t := &tallies[w]
		if t.lat == nil {
			t.lat, t.statuses = load.NewLatencies(), map[int]int{}
		}
		n := t.lat.Count() + int64(t.failed)
		r := rts[int(n+int64(w))%len(rts)]
		name := names[int(n/int64(len(rts))+int64(w))%len(names)]
		// Not ctx: a request started before the end is seen to its answer.
		st, d, err := send(context.Background(), client, s.Base, r, bodies[name], fmt.Sprintf("hostile-%d-%d", w, n))
		if err != nil {
			t.failed++
			if t.firstErr == nil {
				t.firstErr = fmt.Errorf("%s %s with %s: %w", r.method, r.path, name, err)
			}
			return
		}
		t.lat.Record(d)
		t.statuses[st]++
		if d > t.slowest {
			t.slowest, t.slowWhat = d, fmt.Sprintf("%s %s with %s → %d", r.method, r.path, name, st)
		}
	})
	stopSampling()
	hwm, err := s.StatusKB("VmHWM")
	if err != nil {
		return err
	}
	lat, statuses, failed := load.NewLatencies(), map[int]int{}, 0
	var firstErr error
	var slowest time.Duration
	slowWhat := ""
	for _, t := range tallies {
		if t.lat == nil {
			continue
		}
		lat.Merge(t.lat)
		for st, n := range t.statuses {
			statuses[st] += n
		}
		failed += t.failed
		if firstErr == nil {
			firstErr = t.firstErr
		}
		if t.slowest > slowest {
			slowest, slowWhat = t.slowest, t.slowWhat
		}
	}
	codes := make([]int, 0, len(statuses))
	fivexx := 0
	for st, n := range statuses {
		codes = append(codes, st)
		if st >= 500 {
			fivexx += n
		}
	}
	slices.Sort(codes)
	var st strings.Builder
	for _, code := range codes {
		fmt.Fprintf(&st, " %d×%d", code, statuses[code])
	}
	answered := lat.Count()
	fmt.Printf("requests: %d answered, %d unanswered, in %s (%.0f/s, %.1f MB/s of bodies)\n",
		answered, failed, elapsed.Round(time.Millisecond), float64(answered)/elapsed.Seconds(),
		float64(answered)*float64(c.bodySize)/(1<<20)/elapsed.Seconds())
	fmt.Printf("statuses:%s\n", st.String())
	fmt.Printf("latency: p50 %.1f ms, p99 %.1f ms, max %.1f ms (%s)\n",
		load.Ms(lat.Quantile(0.50)), load.Ms(lat.Quantile(0.99)), load.Ms(slowest), slowWhat)
	fmt.Printf("server RSS: %.1f MB idle, %.1f MB peak sampled every 100 ms, %.1f MB peak (VmHWM); goal under %d MB\n",
		float64(idle)/1024, float64(peakRSS)/1024, float64(hwm)/1024, GoalRSSMB)
	if firstErr != nil {
		fmt.Printf("first unanswered request: %v\n", firstErr)
	}
	load.Result("hostile", "peak_rss_mb", float64(hwm)/1024, "p99_ms", lat.Quantile(0.99), "answered", answered,
		"unanswered", failed, "status_5xx", fivexx, "clients", c.clients, "body_bytes", c.bodySize)
	switch {
	case failed > 0:
		return fmt.Errorf("bench hostile: %d requests unanswered (first: %v)", failed, firstErr)
	case fivexx > 0:
		return fmt.Errorf("bench hostile: %d answers were 5xx", fivexx)
	}
	return nil
}
