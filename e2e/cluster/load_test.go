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
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
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

// ack is one acknowledged keyed request: kind is "debit" (points) or
// "hold" (flash sale), id the transaction or reservation it answered with.
type ack struct {
	kind, client, key string
	id                int64
	at                time.Time
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
// with fresh Idempotency-Keys, buyers place flash-sale holds with fresh
// request keys, both through HAProxy to the serve replicas, each retrying
// its key until it is acknowledged; lease holders take one lease in turn
// through HAProxy to the primary and release it.
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
// and its retries are answered 409 with Retry-After meanwhile. It is also
// past the slowest recovery seen with four clusters beside the rest of the
// suite on 2 cores: a client that gives up stops its load, and the next
// waitAcks then reports a stall that was only a slow failover.
const giveUp = 90 * time.Second

// spec sizes a load.
type spec struct{ debitors, buyers, starters, holders int }

// sku is the flash-sale item the buyers hold; its stock outlasts any run.
const sku = "sku-failover"

func startLoad(t *testing.T, c *cluster, sp spec) *load {
	t.Helper()
	ld := &load{c: c, log: newLog(), stop: make(chan struct{}), errs: make(chan error, 100), holders: sp.holders}
	admin := c.token(t, "admin-cluster", httpx.RoleAdmin)
	for i := range sp.debitors {
		client := fmt.Sprintf("user-%03d", i)
		acct := fmt.Sprintf("acct-%03d", i)
		r := c.app.Do(t, lab.Req{Method: "POST", Path: "/points/accounts", Token: admin,
			Body: points.CreateAccountRequest{ID: acct, Owner: client}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r = c.app.Do(t, lab.Req{Method: "POST", Path: "/points/accounts/" + acct + "/grants", Token: admin,
			Body: points.PostingRequest{Amount: points.MaxAmount, Reason: "opening"}, Headers: map[string]string{idem.Header: "open-" + acct}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		tok := c.token(t, client, httpx.RoleUser)
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			ld.keyed("debit", func(n int) (string, string, lab.Req) {
				key := fmt.Sprintf("%s-%05d", client, n)
				return client, key, lab.Req{Method: "POST", Path: "/points/accounts/" + acct + "/debits", Token: tok,
					Body: points.PostingRequest{Amount: 1, Reason: "failover-lab"}, Headers: map[string]string{idem.Header: key}}
			})
		}()
	}
	if sp.buyers > 0 {
		// The SKU is set up as the module's seed does (there is no HTTP
		// route for it): one row, stock for far more holds than a run makes.
		_, err := c.db.Exec(context.Background(), `INSERT INTO flashsale_sku (sku, total, available) VALUES ($1, 1000000, 1000000)`, sku)
		require.NoError(t, err)
	}
	for i := range sp.buyers {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			var tok, user string
			ld.keyed("hold", func(n int) (string, string, lab.Req) {
				// One hold per user (FS-R3), so every hold is a new buyer.
				if u := fmt.Sprintf("buyer-%02d-%05d", i, n); u != user {
					var err error
					if tok, err = c.auth.Mint(u, httpx.RoleUser, time.Hour); err != nil {
						ld.report(err)
					}
					user = u
				}
				key := user + "-k"
				return user, key, lab.Req{Method: "POST", Path: "/flashsale/reservations", Token: tok,
					Body: reserve.ReserveRequest{SKU: sku, RequestKey: key}}
			})
		}()
	}
	svc := c.token(t, "svc-cluster", httpx.RoleService)
	for i := range sp.starters {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			ld.keyed("workflow", func(n int) (string, string, lab.Req) {
				key := fmt.Sprintf("wf-%02d-%05d", i, n)
				return "svc-cluster", key, lab.Req{Method: "POST", Path: "/workflows", Token: svc,
					Body: map[string]any{"business_key": key, "input": map[string]int{"n": n}}}
			})
		}()
	}
	leases := lease.New(c.db)
	for i := range sp.holders {
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

// keyed runs one client: request n is next(n) — its client id, key and
// request — retried with the same key until it is acknowledged (201/202/200
// with the id of what it made) or giveUp passes.
func (ld *load) keyed(kind string, next func(n int) (client, key string, req lab.Req)) {
	for n := 0; !ld.stopped(); n++ {
		client, key, req := next(n)
		deadline := time.Now().Add(giveUp)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := ld.c.app.Send(ctx, req)
			cancel()
			ok := err == nil && (r.Status == http.StatusCreated || r.Status == http.StatusOK || r.Status == http.StatusAccepted)
			switch {
			case ok:
				var made struct {
					ID    int64 `json:"id"`
					JobID int64 `json:"job_id"` // POST /workflows
				}
				jerr := json.Unmarshal(r.Body, &made)
				if made.ID == 0 {
					made.ID = made.JobID
				}
				if jerr != nil || made.ID == 0 {
					ld.report(fmt.Errorf("%s %s: acknowledged with an unreadable body %q", kind, key, r.Body))
					return
				}
				ld.log.mu.Lock()
				ld.log.acks = append(ld.log.acks, ack{kind: kind, client: client, key: key, id: made.ID, at: time.Now()})
				ld.log.mu.Unlock()
			case err != nil:
				ld.log.fail("transport")
			case r.Status == http.StatusServiceUnavailable || r.Status == http.StatusConflict || r.Status == http.StatusBadGateway:
				if r.Status == http.StatusConflict && r.Code() != "idempotency_key_in_flight" {
					ld.report(fmt.Errorf("%s %s: unexpected 409 %s", kind, key, r.Body))
					return
				}
				if r.Status == http.StatusServiceUnavailable && r.Code() == "database_unavailable" && r.Header.Get("Retry-After") == "" {
					ld.report(fmt.Errorf("503 database_unavailable without Retry-After"))
				}
				ld.log.fail(fmt.Sprintf("%d %s", r.Status, r.Code()))
			default:
				ld.report(fmt.Errorf("%s %s: unexpected %d %s", kind, key, r.Status, r.Body))
				return
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				ld.report(fmt.Errorf("%s %s: not acknowledged within %s", kind, key, giveUp))
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

// joinResult is the client log joined against the tables.
type joinResult struct {
	acked   int
	missing []ack // acknowledged, nothing in the table for the key
	doubled []ack // acknowledged, more than one row for the key
	moved   []ack // the key's row is not the one acknowledged
}

func (j joinResult) add(o joinResult) joinResult {
	return joinResult{acked: j.acked + o.acked, missing: append(j.missing, o.missing...),
		doubled: append(j.doubled, o.doubled...), moved: append(j.moved, o.moved...)}
}

// joinSQL finds, for each acknowledged (client, key), the rows the key
// made: points debits by the client's idempotency key, flash-sale holds by
// the buyer's request key.
var joinSQL = map[string]string{
	"debit": `
SELECT k.ord::int, count(t.id), coalesce(min(t.id), 0)
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(client, key, ord)
  LEFT JOIN points_ledger_txn t ON t.client_id = k.client AND t.idem_key = k.key
 GROUP BY k.ord`,
	"hold": `
SELECT k.ord::int, count(r.id), coalesce(min(r.id), 0)
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(client, key, ord)
  LEFT JOIN flashsale_reservation r ON r.user_id = k.client AND r.request_key = k.key
 GROUP BY k.ord`,
	"workflow": `
SELECT k.ord::int, count(j.id), coalesce(min(j.id), 0)
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(client, key, ord)
  LEFT JOIN job_all j ON j.kind = 'workflow' AND j.business_key = k.key
 GROUP BY k.ord`,
}

// join joins the acknowledgements of every kind against their tables.
func join(t *testing.T, c *cluster, log *clientLog) joinResult {
	t.Helper()
	var res joinResult
	for kind, sql := range joinSQL {
		var acks []ack
		for _, a := range log.acks {
			if a.kind == kind {
				acks = append(acks, a)
			}
		}
		res = res.add(joinKind(t, c, sql, acks))
	}
	return res
}

func joinKind(t *testing.T, c *cluster, sql string, acks []ack) joinResult {
	t.Helper()
	clients, keys := make([]string, len(acks)), make([]string, len(acks))
	for i, a := range acks {
		clients[i], keys[i] = a.client, a.key
	}
	rows, err := c.db.Query(context.Background(), sql, clients, keys)
	require.NoError(t, err)
	defer rows.Close()
	res := joinResult{acked: len(acks)}
	for rows.Next() {
		var ord, n int
		var id int64
		require.NoError(t, rows.Scan(&ord, &n, &id))
		a := acks[ord-1]
		switch {
		case n == 0:
			res.missing = append(res.missing, a)
		case n > 1:
			res.doubled = append(res.doubled, a)
		case id != a.id:
			res.moved = append(res.moved, a)
		}
	}
	require.NoError(t, rows.Err())
	return res
}

// effectsMatchKeys checks the other direction: every debit transaction and
// every hold belongs to a key some client sent and was told about (no
// effect without an acknowledged request, none twice).
func effectsMatchKeys(t *testing.T, c *cluster, log *clientLog) {
	t.Helper()
	acked := map[string]int{}
	for _, a := range log.acks {
		acked[a.kind]++
	}
	for kind, sql := range map[string]string{
		"debit":    `SELECT count(*), count(DISTINCT (client_id, idem_key)) FROM points_ledger_txn WHERE kind = 'debit'`,
		"hold":     `SELECT count(*), count(DISTINCT (user_id, request_key)) FROM flashsale_reservation`,
		"workflow": `SELECT count(*), count(DISTINCT business_key) FROM job_all WHERE kind = 'workflow'`,
	} {
		var rows, keys int
		require.NoError(t, c.db.QueryRow(context.Background(), sql).Scan(&rows, &keys))
		require.Equal(t, keys, rows, "one %s per key", kind)
		require.LessOrEqual(t, rows, acked[kind], "no %s without an acknowledged key", kind)
	}
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
// and its writes landed. It is a liveness check, not a timing target (the
// RESULT lines carry the times): its bound only turns a stall into a
// failure, and is wide because four clusters start at once beside the rest
// of the suite on 2 cores, where a failover's recovery has been seen to
// take over 30 s that takes 7 s on a quiet machine.
func (ld *load) waitAcks(t *testing.T, n int) {
	t.Helper()
	ld.log.mu.Lock()
	target, grants := len(ld.log.acks)+n, len(ld.log.grants)
	ld.log.mu.Unlock()
	start := time.Now()
	require.Eventually(t, func() bool {
		ld.log.mu.Lock()
		defer ld.log.mu.Unlock()
		return len(ld.log.acks) >= target && (ld.holders == 0 || len(ld.log.grants) > grants)
	}, 2*time.Minute, 20*time.Millisecond, "the load must make progress")
	if d := time.Since(start); d > 10*time.Second {
		t.Logf("the load took %s to make %d more acknowledged writes", d.Round(100*time.Millisecond), n)
	}
}
