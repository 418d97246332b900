package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/points"
)

// The clients' own log: what each client was told succeeded. After the
// run it is joined against the tables; the database's invariants cannot
// see a write that is simply gone, the client's log can.
type clientLog struct {
	mu         sync.Mutex
	start      time.Time
	acks       []ack                 // acknowledged debits
	grants     []grantRec            // granted lease acquires
	ops        []porcupine.Operation // lease history for the linearizability check
	fails      []failure             // failed attempts (transport error, 5xx, 409 in flight)
	causeCount map[string]int        // failed attempts by cause
}

type ack struct {
	client, key string
	txn         int64
	at          time.Time
}

type failure struct {
	at       time.Time
	inFlight bool // 409: the key's first request is still locked (idem lock TTL)
}

type grantRec struct {
	holder string
	fence  int64
	at     time.Time // when the grant returned
}

func newLog() *clientLog { return &clientLog{start: time.Now(), causeCount: map[string]int{}} }

func (l *clientLog) clock() int64 { return time.Since(l.start).Nanoseconds() }

func (l *clientLog) fail(cause string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fails = append(l.fails, failure{at: time.Now(), inFlight: strings.HasPrefix(cause, "409")})
	l.causeCount[cause]++
}

// load runs the clients until stop is closed: debitors post 1-point debits
// with fresh Idempotency-Keys through HAProxy to the serve replicas and
// retry each key until it is acknowledged; lease holders take one lease in
// turn through HAProxy to the primary and release it.
type load struct {
	c    *cluster
	log  *clientLog
	stop chan struct{}
	wg   sync.WaitGroup
	errs chan error
	// holders is the number of lease holders (0: debits only).
	holders int
}

// giveUp bounds how long one key is retried. It exceeds idem's lock TTL
// (15 s): a request cut off by a crash leaves its key in flight until then,
// and its retries are answered 409 with Retry-After meanwhile.
const giveUp = 25 * time.Second

func startLoad(t *testing.T, c *cluster, debitors, holders int) *load {
	t.Helper()
	ld := &load{c: c, log: newLog(), stop: make(chan struct{}), errs: make(chan error, 100), holders: holders}
	admin := c.token(t, "admin-cluster", httpx.RoleAdmin)
	for i := range debitors {
		client := fmt.Sprintf("user-%03d", i)
		acct := fmt.Sprintf("acct-%03d", i)
		r := c.app.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts", Token: admin,
			Body: points.CreateAccountRequest{ID: acct, Owner: client}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r = c.app.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts/" + acct + "/grants", Token: admin,
			Body: points.PostingRequest{Amount: points.MaxAmount, Reason: "opening"}, Headers: map[string]string{idem.Header: "open-" + acct}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		tok := c.token(t, client, httpx.RoleUser)
		ld.wg.Add(1)
		go func() { defer ld.wg.Done(); ld.debitor(client, acct, tok) }()
	}
	leases := lease.New(c.db)
	for i := range holders {
		ld.wg.Add(1)
		go func() { defer ld.wg.Done(); ld.holder(leases, i) }()
	}
	return ld
}

func (ld *load) stopped() bool {
	select {
	case <-ld.stop:
		return true
	default:
		return false
	}
}

func (ld *load) report(err error) {
	select {
	case ld.errs <- err:
	default:
	}
}

func (ld *load) debitor(client, acct, tok string) {
	for n := 0; !ld.stopped(); n++ {
		key := fmt.Sprintf("%s-%05d", client, n)
		deadline := time.Now().Add(giveUp)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := ld.c.app.Send(ctx, e2etest.Req{Method: "POST", Path: "/points/accounts/" + acct + "/debits", Token: tok,
				Body: points.PostingRequest{Amount: 1, Reason: "failover-lab"}, Headers: map[string]string{idem.Header: key}})
			cancel()
			switch {
			case err == nil && (r.Status == http.StatusCreated || r.Status == http.StatusOK):
				var txn points.Txn
				if jerr := json.Unmarshal(r.Body, &txn); jerr != nil || txn.ID == 0 {
					ld.report(fmt.Errorf("debit %s: acknowledged with an unreadable body %q", key, r.Body))
					return
				}
				ld.log.mu.Lock()
				ld.log.acks = append(ld.log.acks, ack{client: client, key: key, txn: txn.ID, at: time.Now()})
				ld.log.mu.Unlock()
			case err != nil:
				ld.log.fail("transport")
			case r.Status == http.StatusServiceUnavailable || r.Status == http.StatusConflict || r.Status == http.StatusBadGateway:
				cause := fmt.Sprintf("%d %s", r.Status, r.Code())
				if r.Status == http.StatusServiceUnavailable && r.Code() == "database_unavailable" && r.Header.Get("Retry-After") == "" {
					ld.report(fmt.Errorf("503 database_unavailable without Retry-After"))
				}
				ld.log.fail(cause)
			default:
				ld.report(fmt.Errorf("debit %s: unexpected %d %s", key, r.Status, r.Body))
				return
			}
			if err == nil && (r.Status == http.StatusCreated || r.Status == http.StatusOK) {
				break
			}
			if time.Now().After(deadline) {
				ld.report(fmt.Errorf("debit %s: not acknowledged within %s", key, giveUp))
				return
			}
			// Retry-After says 1 s; the lab retries every 100 ms so the
			// measured window is not rounded up to the header's second.
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (ld *load) holder(leases *lease.Manager, i int) {
	holder := fmt.Sprintf("holder-%d", i)
	for !ld.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		call := ld.log.clock()
		l, err := leases.Acquire(ctx, "failover-lab", holder, 500*time.Millisecond)
		ret := ld.log.clock()
		switch {
		case errors.Is(err, lease.ErrHeld):
			ld.log.mu.Lock()
			ld.log.ops = append(ld.log.ops, porcupine.Operation{ClientId: i, Input: acquireIn{}, Output: acquireOut{}, Call: call, Return: ret})
			ld.log.mu.Unlock()
		case err != nil:
			// Outcome unknown (the connection died): a grant we never saw
			// only skips a number, which the model allows, so the
			// operation is left out of the history.
			ld.log.fail("lease")
			time.Sleep(100 * time.Millisecond)
		default:
			ld.log.mu.Lock()
			ld.log.ops = append(ld.log.ops, porcupine.Operation{ClientId: i, Input: acquireIn{}, Output: acquireOut{granted: true, fence: l.Fence}, Call: call, Return: ret})
			ld.log.grants = append(ld.log.grants, grantRec{holder: holder, fence: l.Fence, at: time.Now()})
			ld.log.mu.Unlock()
			_ = leases.Release(ctx, l)
		}
		cancel()
		time.Sleep(20 * time.Millisecond)
	}
}

// finish stops issuing new work, waits for every issued key to be
// acknowledged, and fails the test on any client error.
func (ld *load) finish(t *testing.T) *clientLog {
	t.Helper()
	close(ld.stop)
	ld.wg.Wait()
	close(ld.errs)
	for err := range ld.errs {
		t.Error(err)
	}
	require.False(t, t.Failed(), "the clients reported errors")
	return ld.log
}

// The lease history model: a granted acquire issues a fence larger than
// every fence issued before it (LOCK-I1), in some order consistent with
// real time; a refused one changes nothing.
type (
	acquireIn  struct{}
	acquireOut struct {
		granted bool
		fence   int64
	}
)

var fenceModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		issued, out := state.(int64), output.(acquireOut)
		if !out.granted {
			return true, issued
		}
		return out.fence > issued, out.fence
	},
	Equal: func(a, b any) bool { return a.(int64) == b.(int64) },
	DescribeOperation: func(_, output any) string {
		if out := output.(acquireOut); out.granted {
			return fmt.Sprintf("acquire → fence %d", out.fence)
		}
		return "acquire → held"
	},
}

// joinResult is the client log joined against points_ledger_txn.
type joinResult struct {
	acked   int
	missing []ack // acknowledged, no transaction for the key
	doubled []ack // acknowledged, more than one transaction for the key
	moved   []ack // the key's transaction is not the one acknowledged
}

func joinDebits(t *testing.T, c *cluster, log *clientLog) joinResult {
	t.Helper()
	clients, keys := make([]string, len(log.acks)), make([]string, len(log.acks))
	for i, a := range log.acks {
		clients[i], keys[i] = a.client, a.key
	}
	rows, err := c.db.Query(context.Background(), `
SELECT k.ord::int, count(t.id), coalesce(min(t.id), 0)
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(client, key, ord)
  LEFT JOIN points_ledger_txn t ON t.client_id = k.client AND t.idem_key = k.key
 GROUP BY k.ord`, clients, keys)
	require.NoError(t, err)
	defer rows.Close()
	res := joinResult{acked: len(log.acks)}
	for rows.Next() {
		var ord, n int
		var id int64
		require.NoError(t, rows.Scan(&ord, &n, &id))
		a := log.acks[ord-1]
		switch {
		case n == 0:
			res.missing = append(res.missing, a)
		case n > 1:
			res.doubled = append(res.doubled, a)
		case id != a.txn:
			res.moved = append(res.moved, a)
		}
	}
	require.NoError(t, rows.Err())
	return res
}

// debitsMatchKeys checks the other direction: every debit transaction in
// the ledger belongs to a key some client sent (no effect without a
// request, none twice).
func debitsMatchKeys(t *testing.T, c *cluster, log *clientLog) {
	t.Helper()
	var txns, keys int
	require.NoError(t, c.db.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT (client_id, idem_key)) FROM points_ledger_txn WHERE kind = 'debit'`).Scan(&txns, &keys))
	require.Equal(t, keys, txns, "one debit transaction per key")
	require.LessOrEqual(t, txns, len(log.acks), "no debit without an acknowledged key")
}

// windows measures, from the fault at t0: until when requests failed
// because the database (or a replica) was gone, and until when retries of
// requests cut off by the fault were refused as still in flight (409 until
// idem's lock TTL lets the key be taken over).
func (l *clientLog) windows(t0 time.Time) (unavailable, inFlight time.Duration, fails int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fails {
		if !f.at.After(t0) {
			continue
		}
		fails++
		if f.inFlight {
			inFlight = max(inFlight, f.at.Sub(t0))
		} else {
			unavailable = max(unavailable, f.at.Sub(t0))
		}
	}
	return unavailable, inFlight, fails
}

func (l *clientLog) causes() string {
	var out []string
	for k, v := range l.causeCount {
		out = append(out, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// reissued returns the fences granted after t0 that are not larger than
// the largest fence granted before t0: a fence number handed out twice.
func (l *clientLog) reissued(t0 time.Time) (before int64, again []int64) {
	for _, g := range l.grants {
		if !g.at.After(t0) {
			before = max(before, g.fence)
		}
	}
	for _, g := range l.grants {
		if g.at.After(t0) && g.fence <= before {
			again = append(again, g.fence)
		}
	}
	return before, again
}

// waitAcks waits until the clients have n more acknowledged debits (and,
// with holders, more lease grants) than at the call: the load is running
// and its writes landed.
func (ld *load) waitAcks(t *testing.T, n int, within time.Duration) {
	t.Helper()
	ld.log.mu.Lock()
	target, grants := len(ld.log.acks)+n, len(ld.log.grants)
	ld.log.mu.Unlock()
	require.Eventually(t, func() bool {
		ld.log.mu.Lock()
		defer ld.log.mu.Unlock()
		return len(ld.log.acks) >= target && (ld.holders == 0 || len(ld.log.grants) > grants)
	}, within, 20*time.Millisecond, "the load must make progress")
}
