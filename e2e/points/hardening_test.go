package points_test

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	pointslab "github.com/fencelab/fencelab/lab/points"
)

// Issue 20 item 5: a client hangs up after its key's claim has committed
// but before the server has read the COMMIT's answer. The app reaches the
// database through a proxy that holds the database's answers, so the claim
// commits (the database sees a live client) while the app waits; then the
// HTTP client hangs up. Before, the cancelled request context failed the
// claim's read, the server treated the claim as not made and skipped the
// release: every retry got 409 idempotency_key_in_flight for the whole
// 15 s lock. Now the claim runs on a context the client cannot cancel, and
// a claim made for a departed client is released at once.
func TestClientAbortReleasesItsKey(t *testing.T) {
	l, tok, proxy, dbURL := startBehindCutProxy(t, "acct-abort", "user-abort", 100)
	key := pointslab.NewKey()
	ctx := context.Background()
	direct, err := pgx.Connect(ctx, dbURL) // the test's own view, not through the proxy
	require.NoError(t, err)
	defer direct.Close(ctx)
	inFlight := func() bool {
		var n int
		require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM idem_request WHERE key = $1 AND state = 'in_flight'`, key).Scan(&n))
		return n > 0
	}

	proxy.freeze(true)
	reqCtx, hangUp := context.WithCancel(ctx)
	sent := make(chan error, 1)
	go func() {
		_, err := l.Posting(reqCtx, "debits", tok, "acct-abort", key, 30, "prize-17")
		sent <- err
	}()
	e2etest.WaitFor(t, 10*time.Second, "the claim to commit", inFlight)
	hangUp()
	require.Error(t, <-sent, "the client gave up")
	// Give a request that treats the hang-up as a failed claim the time to
	// drop its connection (the proxy sees it); one that keeps waiting for
	// the answer is released by the thaw.
	select {
	case <-proxy.appGone:
	case <-time.After(2 * time.Second):
	}
	proxy.freeze(false)

	// Well inside the 15 s lock: the key must be free again.
	e2etest.WaitFor(t, 5*time.Second, "the departed client's claim to be released", func() bool { return !inFlight() })
	r := l.Debit(t, tok, "acct-abort", key, 30)
	require.Equal(t, http.StatusCreated, r.Status, "the retry runs at once: %s", r.Body)
	require.Equal(t, 1, l.TxnsOf(t, "user-abort", key))
	require.Equal(t, int64(70), l.Account(t, "acct-abort").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// Issue 20 item 12: two Idempotency-Key headers. The first used to win, and
// a retry sending the second made a second debit. Either header alone is a
// key; both at once are 400 and debit nothing.
func TestTwoIdempotencyKeyHeadersAreRefused(t *testing.T) {
	l, tok := startWithAccount(t, "acct-two", "user-two", 100)
	before := l.Ledger(t)
	req, err := http.NewRequest(http.MethodPost, l.URL+"/points/accounts/acct-two/debits",
		strings.NewReader(`{"amount":10,"reason":"prize-17"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Add(idem.Header, "key-one")
	req.Header.Add(idem.Header, "key-two")
	resp, err := l.Client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"code":"idempotency_key_invalid"`)
	require.Equal(t, before, l.Ledger(t), "nothing written")

	// Each key alone: one debit each, as two distinct requests; a replay
	// of either adds nothing.
	require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-two", "key-one", 10).Status)
	require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-two", "key-one", 10).Status) // replay
	require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-two", "key-two", 10).Status)
	require.Equal(t, int64(80), l.Account(t, "acct-two").Balance)
	require.Equal(t, 1, l.TxnsOf(t, "user-two", "key-one"))
	require.Equal(t, 1, l.TxnsOf(t, "user-two", "key-two"))
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// A duplicate key in the body used to mean its last value: a debit of
// {"amount":1,"amount":500} took 500. It is a 400 now, and debits nothing.
func TestDuplicateKeysInADebitDebitNothing(t *testing.T) {
	l, tok := startWithAccount(t, "acct-dup", "user-dup", 1000)
	before := l.Ledger(t)
	for _, body := range []string{`{"amount":1,"amount":500,"reason":"x"}`, `{"Amount":500,"reason":"x"}`, `{"amount":1,"reason":"x","REASON":"y"}`} {
		r := l.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts/acct-dup/debits", Token: tok, Body: body,
			Headers: map[string]string{idem.Header: pointslab.NewKey()}, Invalid: true})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Body)
	}
	require.Equal(t, before, l.Ledger(t))
	require.Equal(t, int64(1000), l.Account(t, "acct-dup").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// slotsRole creates a login role (not a superuser: PostgreSQL exempts
// superusers from connection limits) that may read and write every table
// of the test's database, and returns the database URL as that role.
func slotsRole(t *testing.T, dbURL string) (roleURL, superURL, role string) {
	t.Helper()
	ctx := context.Background()
	srv := pgtest.Server(t)
	su, err := url.Parse(dbURL)
	require.NoError(t, err)
	su.User = url.UserPassword(srv.User, srv.Password)
	superURL = su.String()
	admin, err := pgx.Connect(ctx, superURL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	role = "slots_" + strings.ToLower(rand.Text()[:10])
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	db := strings.TrimPrefix(u.Path, "/")
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT pg_read_all_data, pg_write_all_data TO ` + role,
		`GRANT CONNECT, TEMPORARY ON DATABASE "` + db + `" TO ` + role,
	} {
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), superURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		_, _ = c.Exec(context.Background(), `REVOKE ALL ON DATABASE "`+db+`" FROM `+role)
		_, _ = c.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	u.User = url.User(role)
	return u.String(), superURL, role
}

// Issue 20 item 2: PostgreSQL out of connection slots (SQLSTATE 53300,
// "too many connections") was answered 500 without Retry-After. It is 503
// database_unavailable with Retry-After: nothing happened, retry later.
// The same key then succeeds once the database has room again.
func TestDatabaseOutOfSlotsIsA503(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	roleURL, superURL, role := slotsRole(t, dbURL)
	l := startWith(t, lab.Options{DBURL: roleURL})
	l.OpenAccount(t, "acct-slots", "user-slots", 100)
	tok := l.User(t, "user-slots")
	ctx := context.Background()

	admin, err := pgx.Connect(ctx, superURL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `ALTER ROLE `+role+` CONNECTION LIMIT 0`)
	require.NoError(t, err)
	l.Pool.Reset() // every new request needs a new connection: none is left
	key := pointslab.NewKey()
	for range 3 {
		r := l.Debit(t, tok, "acct-slots", key, 30)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
		require.Equal(t, "database_unavailable", r.Code())
		require.Equal(t, "1", r.Header.Get("Retry-After"))
		require.NotContains(t, string(r.Body), "53300")
		require.NotContains(t, string(r.Body), role)
	}
	_, err = admin.Exec(ctx, `ALTER ROLE `+role+` CONNECTION LIMIT -1`)
	require.NoError(t, err)
	r := l.Debit(t, tok, "acct-slots", key, 30)
	require.Equal(t, http.StatusCreated, r.Status, "the same key succeeds once there is room: %s", r.Body)
	require.Equal(t, int64(70), l.Account(t, "acct-slots").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// cutProxy forwards TCP to target. It can cut every connection it
// carries, and freeze the server-to-client direction: the database's
// answers wait in the proxy while the database itself sees a live client.
type cutProxy struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	conns    []net.Conn
	frozen   bool
	thaw     *sync.Cond
	appGone  chan struct{} // a client (app) side closed its connection
	goneOnce sync.Once
}

// startBehindCutProxy is startWithAccount with the app reaching its
// database through a cutProxy; dbURL is the test's own direct way in.
func startBehindCutProxy(t *testing.T, account, owner string, balance int64) (l *pointslab.Lab, tok string, proxy *cutProxy, dbURL string) {
	t.Helper()
	t.Parallel()
	dbURL = pgtest.URL(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	proxy = newCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	l = startWith(t, lab.Options{DBURL: u.String()})
	l.OpenAccount(t, account, owner, balance)
	return l, l.User(t, owner), proxy, dbURL
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, appGone: make(chan struct{})}
	p.thaw = sync.NewCond(&p.mu)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() {
				_, _ = io.Copy(s, c)
				p.mu.Lock()
				frozen := p.frozen
				p.mu.Unlock()
				if frozen {
					p.goneOnce.Do(func() { close(p.appGone) })
				}
				s.Close()
			}()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					p.mu.Lock()
					for p.frozen {
						p.thaw.Wait()
					}
					p.mu.Unlock()
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.freeze(false); p.cut() })
	return p
}

// cut closes every connection carried so far (new ones still pass).
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// freeze holds (or releases) every answer from the database.
func (p *cutProxy) freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.mu.Unlock()
	p.thaw.Broadcast()
}

// Issue 20 item 3: the database connection is lost in the middle of a
// request (an immediate stop, a cut network) — here between the debit's
// effect and its COMMIT. The driver reports the socket's end ("unexpected
// EOF", "conn closed"); that used to be a 500, though such a request may
// have committed. It is a 503 database_unavailable with Retry-After ("not
// known; retry with your key"), and the retry with the same key leaves
// exactly one debit.
func TestConnectionLostMidRequestIsA503(t *testing.T) {
	l, tok, proxy, _ := startBehindCutProxy(t, "acct-cut", "user-cut", 100)

	for i, point := range []string{idem.PointBeforeEffect, idem.PointBeforeFinish} {
		key := pointslab.NewKey()
		l.Faults.ArmFunc(point, func(ctx context.Context, k string) error {
			if k == key {
				proxy.cut() // every connection, the request's own included
			}
			return nil
		})
		r := l.Debit(t, tok, "acct-cut", key, 10)
		l.Faults.Disarm(point)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s: %s", point, r.Body)
		require.Equal(t, "database_unavailable", r.Code())
		require.Equal(t, "1", r.Header.Get("Retry-After"))
		require.NotContains(t, string(r.Body), "EOF")

		r = l.Debit(t, tok, "acct-cut", key, 10)
		require.Equal(t, http.StatusCreated, r.Status, "%s: the retry with the same key: %s", point, r.Body)
		require.Equal(t, 1, l.TxnsOf(t, "user-cut", key))
		require.Equal(t, int64(100-10*(i+1)), l.Account(t, "acct-cut").Balance)
	}
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// Issue 20 item 4: under pool exhaustion write requests queued without
// bound, and /readyz called a healthy but busy database "unreachable".
// Now writes pass a per-process admission limit with a bounded line
// (beyond it: 503 overloaded + Retry-After, at once), and readiness says
// "busy" while every connection is in use.
func TestWriteAdmissionIsBoundedAndReadinessSaysBusy(t *testing.T) {
	t.Parallel()
	l := startWith(t, lab.Options{MaxConns: 1, Settings: map[string]string{
		"FENCELAB_ADMISSION_LIMIT": "1", "FENCELAB_ADMISSION_WAIT_LINE": "1", "FENCELAB_ADMISSION_MAX_WAIT": "1m",
		"FENCELAB_FLASHSALE_LIMIT": "1",
	}})
	l.OpenAccount(t, "acct-busy", "user-busy", 100)
	tok := l.User(t, "user-busy")
	first, second := pointslab.NewKey(), pointslab.NewKey()

	// The first debit holds the only permit and the only connection.
	gate := l.Faults.Pause(idem.PointBeforeFinish, first)
	defer gate.Release()
	results := make(chan e2etest.Response, 2)
	errs := make(chan error, 2)
	for _, key := range []string{first, second} {
		go func() {
			r, err := l.Posting(context.Background(), "debits", tok, "acct-busy", key, 10, "prize-17")
			errs <- err
			results <- r
		}()
		if key == first {
			<-gate.Reached()
		}
	}
	e2etest.WaitFor(t, 10*time.Second, "the second debit to wait in line", func() bool {
		return l.Gauge(t, "fencelab_admission_waiting", "limiter", "write") == 1
	})

	// The line is full: refused at once, nothing done.
	r := l.Debit(t, tok, "acct-busy", pointslab.NewKey(), 10)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Equal(t, "overloaded", r.Code())
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	// Reads are not queued behind writes; readiness is "busy", not "unreachable".
	rz := l.Do(t, e2etest.Req{Method: "GET", Path: "/readyz"})
	require.Equal(t, http.StatusServiceUnavailable, rz.Status, string(rz.Body))
	require.Equal(t, "busy", rz.Code(), string(rz.Body))
	require.Equal(t, "1", rz.Header.Get("Retry-After"))

	gate.Release()
	for range 2 {
		require.NoError(t, <-errs)
		r := <-results
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	require.Equal(t, int64(80), l.Account(t, "acct-busy").Balance)
	rz = l.Do(t, e2etest.Req{Method: "GET", Path: "/readyz"})
	require.Equal(t, http.StatusOK, rz.Status, string(rz.Body))
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// Issue 20 item 13: an admin cannot create a user account owned by the
// reserved subject that owns the system accounts.
func TestSystemOwnerIsReserved(t *testing.T) {
	t.Parallel()
	l := start(t)
	before := l.Ledger(t)
	for _, owner := range []string{"fencelab", "FenceLab"} {
		r := l.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts", Token: l.Admin,
			Body: map[string]string{"id": "acct-sys", "owner": owner}, Invalid: true})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		require.Equal(t, "invalid_owner", r.Code())
	}
	require.Equal(t, before, l.Ledger(t))
	e2etest.Assert(t, l.Pool, "points")
}
