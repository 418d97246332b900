package pointsbench_test

import (
	"context"
	crand "crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/program"
	"github.com/fencelab/fencelab/services/points"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// countingProxy forwards TCP to PostgreSQL and counts what the client
// sends: pgx writes a statement, a batch or a pipeline in one write and
// then waits for the answer, so each burst is one round trip.
type countingProxy struct {
	ln     net.Listener
	target string
	bursts atomic.Int64
	wg     sync.WaitGroup
}

func newCountingProxy(t testing.TB, target string) *countingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &countingProxy{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *countingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		p.wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.bursts.Add(1)
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = s.Close()
		})
	}
}

type handlerBench struct {
	h     http.Handler
	pool  pg.Querier
	proxy *countingProxy
	inv   *invariant.Registry
	token string
	id    string
}

// setup builds the whole deployable (every module and middleware, as
// `fencelab bench points` does, background tasks off) on a fresh database
// reached through a counting proxy, and opens one account.
func setup(t testing.TB) *handlerBench {
	ctx := context.Background()
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	proxy := newCountingProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	cfg := app.Defaults()
	cfg.DatabaseURL = u.String()
	cfg.AccessLog = false
	cfg.TokenSecret = crand.Text()
	p, err := app.Build(ctx, cfg, program.Modules(nil), app.BuildOptions{Role: "bench-points-handler",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	svc, err := points.NewService(p.Deps, points.Config{})
	require.NoError(t, err)
	_, err = svc.CreateAccount(ctx, p.Deps.Pool, points.CreateAccountRequest{ID: "acct-bench", Owner: "user-bench"})
	require.NoError(t, err)
	require.NoError(t, pg.InTx(ctx, p.Deps.Pool, func(tx pgx.Tx) error {
		_, err := svc.Grant(ctx, tx, "bench", "opening", "acct-bench", points.PostingRequest{Amount: points.MaxAmount, Reason: "bench opening"})
		return err
	}))
	tok, err := p.Deps.Auth.Mint("user-bench", httpx.RoleUser, time.Hour)
	require.NoError(t, err)
	return &handlerBench{h: p.HTTP(), pool: p.Deps.Pool, proxy: proxy, inv: p.Invariants, token: tok, id: "acct-bench"}
}

func (hb *handlerBench) debit(t testing.TB, key string) {
	req := httptest.NewRequest(http.MethodPost, "/points/accounts/"+hb.id+"/debits", strings.NewReader(`{"amount":1,"reason":"bench"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+hb.token)
	req.Header.Set(idem.Header, key)
	rec := httptest.NewRecorder()
	hb.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("debit: %d %s", rec.Code, rec.Body)
	}
}

// A debit over the HTTP path costs three round trips to PostgreSQL: the
// idempotency claim (one pipelined transaction), BEGIN with the debit, and
// the outbox event, the fenced finish and the COMMIT. Every invariant of
// the modules it went through holds afterwards.
func TestDebitTakesThreeRoundTrips(t *testing.T) {
	hb := setup(t)
	for i := range 3 { // the connections' statement caches warm up
		hb.debit(t, "warm-"+string(rune('a'+i)))
	}
	const n = 20
	before := hb.proxy.bursts.Load()
	for i := range n {
		hb.debit(t, crand.Text()+string(rune('a'+i)))
	}
	perDebit := float64(hb.proxy.bursts.Load()-before) / n
	t.Logf("round trips per debit: %.2f", perDebit)
	require.InDelta(t, 3, perDebit, 0.3)
	for _, r := range hb.inv.Run(context.Background(), hb.pool, "points", "idem", "outbox") {
		require.True(t, r.Holds(), "%s: %v", r.ID, r.Rows)
	}
}

// BenchmarkDebitHandler is one debit through the whole HTTP stack
// (in-process, no socket on the HTTP side) against real PostgreSQL:
//
//	go test ./bench/points -run '^$' -bench DebitHandler -benchmem
func BenchmarkDebitHandler(b *testing.B) {
	hb := setup(b)
	hb.debit(b, "warm")
	before := hb.proxy.bursts.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		hb.debit(b, "k-"+crand.Text())
	}
	b.StopTimer()
	b.ReportMetric(float64(hb.proxy.bursts.Load()-before)/float64(b.N), "roundtrips/op")
}
