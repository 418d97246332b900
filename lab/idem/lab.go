// The idempotency chapter's experiments (chapter 3): core/idem has no demo
// module of its own, so each builds the smallest honest demo on its
// scratch database — a debit behind idem.Require — and runs the chapter's
// timeline against it.

package idem

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
)

// Experiments are the idempotency chapter's runnable claims.
var Experiments = []lab.Experiment{IdemConcurrentSameKey, IdemCrashedRequest, IdemOwnerGone}

// idemSchema is the demo's own effect: a debit that moves a balance and
// writes one effect row. demo_effect has no unique key on purpose — if a
// key's effect ever ran twice, two rows would say so.
const idemSchema = `
CREATE TABLE demo_account (owner text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
CREATE TABLE demo_effect (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner  text   NOT NULL,
    key    text   NOT NULL,
    amount bigint NOT NULL
);
INSERT INTO demo_account VALUES ('user-0042', 1000);`

const (
	idemScope = "demo.debit"
	idemUser  = "user-0042"
	body30    = `{"amount":30,"reason":"prize-17"}`
)

// idemDemoApp is the application_name of the demo's sessions.
const idemDemoApp = "fencelab-idem-demo"

// idemDemo is POST /demo/accounts/:owner/debits behind real auth and
// idem.Require on a real HTTP server over the experiment's database.
type idemDemo struct {
	pool   *pgxpool.Pool
	url    string
	faults *faults.Set
	token  string
}

func newIdemDemo(x *lab.X) *idemDemo {
	x.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(x.Database())
	require.NoError(x, err)
	// The demo's sessions serve the clients' requests: the overlap watcher
	// counts them as the actors' sessions (a lock wait between two of them
	// is two copies of the request meeting at the key).
	cfg.ConnConfig.RuntimeParams["application_name"] = idemDemoApp
	x.ActorSessions(idemDemoApp)
	// One session per concurrent copy (pgxpool's default is 4 on 2 cores),
	// so that the copies can all be in the database at once.
	cfg.MaxConns = demoSessions
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(x, err)
	x.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, idemSchema)
	require.NoError(x, err)
	auth, err := httpx.NewAuth([]byte("idem-lab-secret-0123456789abcdef"))
	require.NoError(x, err)
	fs := faults.New()
	keys := idem.NewKeys(pool, idem.Options{Faults: fs})
	e := httpx.New(httpx.Options{})
	e.POST("/demo/accounts/:owner/debits", func(c echo.Context) error {
		owner := c.Param("owner")
		if err := httpx.RequireOwner(c, owner); err != nil {
			return err
		}
		var req struct {
			Amount int64  `json:"amount"`
			Reason string `json:"reason"`
		}
		if err := httpx.Bind(c, &req); err != nil {
			return err
		}
		key := c.Request().Header.Get(idem.Header)
		return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
			return debit(ctx, tx, owner, key, req.Amount, req.Reason)
		})
	}, auth.Require(httpx.RoleUser), keys.Require(idemScope))
	srv := httptest.NewServer(e)
	x.Cleanup(srv.Close)
	tok, err := auth.Mint(idemUser, httpx.RoleUser, time.Hour)
	require.NoError(x, err)
	return &idemDemo{pool: pool, url: srv.URL, faults: fs, token: tok}
}

// demoSessions bounds the demo pool: as many sessions as the largest
// crowd of copies an experiment sends at once.
const demoSessions = 20

// warm opens the demo pool's sessions before a crowd of copies is let
// go, so that the copies meet in the database and not in connection
// start-up: a new session takes longer to start than the whole request
// takes on a warm one, so copies that each had to open one arrived one
// after the other, every later copy was simply replayed, and the
// overlap the experiment claims was not there to observe.
func (d *idemDemo) warm(x *lab.X) {
	x.Helper()
	ctx := context.Background()
	conns := make([]*pgxpool.Conn, 0, demoSessions)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range demoSessions {
		c, err := d.pool.Acquire(ctx)
		require.NoError(x, err)
		conns = append(conns, c)
	}
}

// debit is the demo's effect: one guarded UPDATE and one effect row.
func debit(ctx context.Context, tx pgx.Tx, owner, key string, amount int64, reason string) (int, any, error) {
	var balance int64
	err := tx.QueryRow(ctx, `UPDATE demo_account SET balance = balance - $2
	                          WHERE owner = $1 AND balance >= $2 RETURNING balance`, owner, amount).Scan(&balance)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, httpx.Conflict("insufficient_balance", "the balance does not cover %d", amount)
	}
	if err != nil {
		return 0, nil, err
	}
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO demo_effect (owner, key, amount) VALUES ($1, $2, $3) RETURNING id`,
		owner, key, amount).Scan(&id); err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, map[string]any{"effect_id": id, "balance": balance, "amount": amount, "reason": reason}, nil
}

// debit30 runs the demo's debit of 30 for key in tx and returns what a
// finished record keeps of it: the status and the JSON body.
func debit30(ctx context.Context, tx pgx.Tx, key string) (int, []byte, error) {
	status, resp, err := debit(ctx, tx, idemUser, key, 30, "prize-17")
	if err != nil {
		return 0, nil, err
	}
	body, err := json.Marshal(resp)
	return status, body, err
}

// lookKey is the "check" of check-then-insert: how many records the key
// has. The naive timeline (naiveSameKey) and every explored copy, guarded
// or naive, look with it.
func lookKey(ctx context.Context, db *pgxpool.Pool, key string) (int, error) {
	var seen int
	err := db.QueryRow(ctx, `SELECT count(*) FROM idem_request WHERE scope = $1 AND subject = $2 AND key = $3`,
		idemScope, idemUser, key).Scan(&seen)
	return seen, err
}

// naiveDebitAndRecord is the "then" of the naive check-then-insert: a copy
// whose look found no record runs the debit and inserts the key's record,
// finished, in one transaction. On records without their primary key
// nothing stops two copies that both looked first from doing it twice:
// two records and two effects for one key (IDEM-I1). The timeline
// (naiveSameKey) and the explored schedules run this one write.
func naiveDebitAndRecord(ctx context.Context, db *pgxpool.Pool, key string, fp []byte) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		status, body, err := debit30(ctx, tx, key)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO idem_request (scope, subject, key, fingerprint, state, status, content_type, body, finished_at)
		                       VALUES ($1, $2, $3, $4, 'done', $5, 'application/json', $6, now())`,
			idemScope, idemUser, key, fp, status, body)
		return err
	})
}

func (d *idemDemo) send(ctx context.Context, key string) (lab.Response, error) {
	a := lab.App{URL: d.url, Client: http.DefaultClient}
	return a.Send(ctx, lab.Req{Method: "POST", Path: "/demo/accounts/" + idemUser + "/debits", Body: body30,
		Token: d.token, Headers: map[string]string{idem.Header: key}})
}

func (d *idemDemo) post(x *lab.X, key string) lab.Response {
	x.Helper()
	r, err := d.send(context.Background(), key)
	require.NoError(x, err)
	return r
}

// effects re-reads the ground truth for one key.
func (d *idemDemo) effects(x *lab.X, key string) (n int, balance int64) {
	x.Helper()
	ctx := context.Background()
	require.NoError(x, d.pool.QueryRow(ctx, `SELECT count(*) FROM demo_effect WHERE owner = $1 AND key = $2`, idemUser, key).Scan(&n))
	require.NoError(x, d.pool.QueryRow(ctx, `SELECT balance FROM demo_account WHERE owner = $1`, idemUser).Scan(&balance))
	return n, balance
}

func replayed(r lab.Response) bool { return r.Header.Get(idem.ReplayedHeader) == "true" }

// IdemConcurrentSameKey: 20 copies of one request, one key, sent at once.
// One runs the effect; the others are told the key is in flight (409) or
// get the first response replayed. One effect row, one debit.
//
// The naive version is the key checked, then inserted: each copy looks
// the key up, finds nothing (every copy reads before any writes), runs the
// debit and records its key — on a table without the primary key that
// would have refused the second record. IDEM-I1 reports the key recorded
// 20 times; the demo's ledger shows 20 debits.
var IdemConcurrentSameKey = lab.Experiment{
	ID:         "idem/concurrent-same-key",
	Test:       "TestIdempotencyConcurrentSameKeyOneEffect",
	Claim:      "20 copies of one request with one Idempotency-Key, at once: one effect, the rest 409 in flight or the replayed response",
	Overlap:    true,
	Invariants: []string{"idem"},
	Naive:      "look the key up, then run the effect and insert the key's record — a check-then-insert, no primary key on the records",
	Catches:    []string{"IDEM-I1"},
	Control:    "the same check-then-insert by one client: nothing interleaves, one record, one debit",
	Run:        runIdemConcurrentSameKey,
	Explore:    sameKeyExplore,
}

func runIdemConcurrentSameKey(x *lab.X) {
	d := newIdemDemo(x)
	const clients, key = demoSessions, "k-race-1"
	x.Step(lab.Step{Actor: "db", Action: "demo account user-0042 holds 1000"})
	d.warm(x)
	if x.Naive {
		n := clients
		if x.Control {
			n = 1 // the race taken out: one client
		}
		naiveSameKey(x, d, n, key)
		return
	}
	replies, errs := make([]lab.Response, clients), make([]error, clients)
	lab.AtOnce(clients, func(i int) {
		replies[i], errs[i] = d.send(context.Background(), key)
	})
	require.NoError(x, errors.Join(errs...))
	var first *lab.Response
	inFlight, replays := 0, 0
	for i, r := range replies {
		step := lab.Step{Actor: fmt.Sprintf("client-%02d", i+1), Action: "debit 30, key " + key}
		switch {
		case r.Status == http.StatusCreated && !replayed(r):
			require.Nil(x, first, "two requests ran the effect")
			first = &replies[i]
			step.Outcome, step.Note = lab.Accepted, "ran the effect"
		case r.Status == http.StatusCreated:
			replays++
			step.Outcome = lab.Replayed
		case r.Status == http.StatusConflict:
			require.Equal(x, "idempotency_key_in_flight", r.Code())
			require.Equal(x, "1", r.Header.Get("Retry-After"))
			inFlight++
			step.Outcome, step.Note = lab.Refused, "409 in flight, Retry-After: 1"
		default:
			x.Fatalf("unexpected reply %d %s", r.Status, r.Body)
		}
		x.Step(step)
	}
	require.NotNil(x, first, "one request must run the effect")
	for _, r := range replies {
		if replayed(r) {
			require.Equal(x, first.Body, r.Body, "a replay is the stored bytes")
		}
	}
	n, balance := d.effects(x, key)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effect row for the key, balance %d", n, balance)})
	x.Figure("requests", clients)
	x.Figure("effects", n)
	x.Figure("in_flight", inFlight)
	x.Figure("replayed", replays)
	require.Equal(x, 1, n)
	require.EqualValues(x, 970, balance)
}

// naiveSameKey is the check-then-insert of a key, done by the experiment on
// its scratch database: the product's claim of a key is one INSERT … ON
// CONFLICT that the primary key arbitrates.
func naiveSameKey(x *lab.X, d *idemDemo, clients int, key string) {
	ctx := context.Background()
	_, err := d.pool.Exec(ctx, `ALTER TABLE idem_request DROP CONSTRAINT idem_request_pkey`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: idem_request's primary key (scope, subject, key) dropped"})
	fp := sha256.Sum256([]byte(body30))
	var read sync.WaitGroup // every copy has looked the key up before any writes
	read.Add(clients)
	lab.AtOnce(clients, func(i int) {
		actor := fmt.Sprintf("client-%02d", i+1)
		seen, err := lookKey(ctx, d.pool, key)
		read.Done()
		read.Wait()
		if err != nil {
			x.Error(actor, "look up key "+key, err)
			return
		}
		if seen > 0 {
			x.Step(lab.Step{Actor: actor, Action: "look up key " + key, Outcome: "found"})
			return
		}
		err = naiveDebitAndRecord(ctx, d.pool, key, fp[:])
		const action = "look up key: none; debit 30, record the key"
		if err != nil {
			x.Error(actor, action, err)
			return
		}
		x.Step(lab.Step{Actor: actor, Action: action, Outcome: lab.Accepted})
	})
	n, balance := d.effects(x, key)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effect rows for one key, balance %d", n, balance)})
	x.Figure("requests", clients)
	x.Figure("effects", n)
}

// IdemCrashedRequest is the book's stalled-holder timeline on an
// idempotency record, twice. Request A claims the key, then stalls (a fault
// point; to everyone else it looks crashed); while its lock holds, a retry
// is told to wait. Its lock expiry is forced with SQL. Retry B takes the
// record over with a new fence and succeeds once. When A wakes up, its
// finish is conditional on the fence it no longer holds: refused, and its
// transaction — effect included — rolls back. First A stalls before its
// effect; then inside it, holding the account row's lock, so B's debit
// waits for A's rollback.
//
// The naive version keeps records without a fence: B takes the expired
// key over with a record of its own and A, waking, finishes its own —
// IDEM-I1 reports the key's two records, the demo's ledger two debits.
// Its control, where A does not stall, makes one record and one debit.
var IdemCrashedRequest = lab.Experiment{
	ID:         "idem/crashed-request-taken-over",
	Test:       "TestIdempotencyCrashedRequestIsTakenOver",
	Claim:      "a request that stalls past its key's lock is taken over by the retry; when it wakes, its fenced finish is refused and its effect rolls back",
	Invariants: []string{"idem"},
	Naive:      "records without a fence (and no primary key): the retry takes an expired key over with a record of its own, and the stalled original wakes and finishes its own — two records, two effects for one key",
	Catches:    []string{"IDEM-I1"},
	Control:    "the same fenceless records without the stall: the original finishes inside its lock, the retry finds its record and replays it",
	Run:        runIdemCrashedRequest,
}

func runIdemCrashedRequest(x *lab.X) {
	d := newIdemDemo(x)
	ctx := context.Background()
	if x.Naive {
		naiveCrashedRequest(x, d)
		return
	}
	x.Say("client-A", "— timeline 1: A stalls before its effect —")
	{
		const key = "k-crash-1"
		a, gate, fenceA := d.stall(x, idem.PointBeforeEffect, key)
		d.expire(x, key, fenceA)
		retry := d.post(x, key)
		require.Equal(x, http.StatusCreated, retry.Status, string(retry.Body))
		require.False(x, replayed(retry), "the retry ran the effect itself")
		fenceB := d.takenOver(x, key, fenceA)
		x.Step(lab.Step{Actor: "client-B", Action: "retry: take the record over, debit 30", Outcome: lab.Accepted, Fence: fenceB})
		gate.Release()
		late := <-a
		require.Equal(x, http.StatusCreated, late.Status)
		require.True(x, replayed(late), "A's own finish was refused; it answers with the record")
		require.Equal(x, retry.Body, late.Body)
		x.Step(lab.Step{Actor: "client-A", Action: "wake: debit 30, finish under its fence", Outcome: lab.Refused, Fence: fenceA,
			Note: "its transaction rolled back; it answers with B's recorded response"})
		d.requireOneEffect(x, key, retry.Body)
	}
	x.Say("client-A", "— timeline 2: A stalls inside its effect, holding the account row —")
	{
		const key = "k-crash-2"
		a, gate, fenceA := d.stall(x, idem.PointBeforeFinish, key)
		d.expire(x, key, fenceA)
		bDone := make(chan lab.Response, 1)
		go func() {
			r, err := d.send(ctx, key)
			if err != nil {
				x.Errorf("B: %v", err)
			}
			bDone <- r
		}()
		lab.WaitFor(x, 10*time.Second, "B's takeover", func() bool {
			var takeovers int
			_ = d.pool.QueryRow(ctx, `SELECT takeovers FROM idem_request WHERE key = $1`, key).Scan(&takeovers)
			return takeovers == 1
		})
		x.Step(lab.Step{Actor: "client-B", Action: "retry: take the record over; its debit waits for A's row lock", Outcome: "waiting"})
		gate.Release()
		late := <-a
		retry := <-bDone
		require.Equal(x, http.StatusCreated, retry.Status, string(retry.Body))
		require.False(x, replayed(retry))
		fenceB := d.takenOver(x, key, fenceA)
		lateOutcome := lab.Replayed
		if late.Status == http.StatusCreated {
			require.True(x, replayed(late))
			require.Equal(x, retry.Body, late.Body)
		} else {
			require.Equal(x, "idempotency_key_in_flight", late.Code())
			lateOutcome = "409 in flight"
		}
		x.Step(lab.Step{Actor: "client-A", Action: "wake: finish under its fence", Outcome: lab.Refused, Fence: fenceA,
			Note: "rolled back (its debit with it); answered " + lateOutcome})
		x.Step(lab.Step{Actor: "client-B", Action: "debit 30 after A's rollback, finish", Outcome: lab.Accepted, Fence: fenceB})
		d.requireOneEffect(x, key, retry.Body)
	}
	_, balance := d.effects(x, "k-crash-2")
	x.Figure("stalled_finishes_refused", 2)
	x.Figure("effects", 2)
	x.Figure("balance", balance)
	require.EqualValues(x, 940, balance)
}

// naiveCrashedRequest is the key's record without a fence, on a table
// without its primary key (the naive schema): a request claims the key by
// inserting an in-flight record when it finds none live, runs the demo's
// debit, and finishes by marking its in-flight record done — a finish
// that does not ask whether the record is still its own. A stalls between
// its claim and its effect; its lock expiry is forced with SQL; B's retry
// finds the lock expired and claims the key with a record of its own, as
// the product's takeover does but without bumping a fence; then A wakes
// and finishes. IDEM-I1 reports the key's two records, and the demo's
// ledger shows two debits. In the control A does not stall: it finishes
// inside its lock and B's retry replays its record.
func naiveCrashedRequest(x *lab.X, d *idemDemo) {
	ctx := context.Background()
	const key = "k-crash-naive"
	_, err := d.pool.Exec(ctx, `ALTER TABLE idem_request DROP CONSTRAINT idem_request_pkey`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: idem_request's primary key (scope, subject, key) dropped"})
	fp := sha256.Sum256([]byte(body30))
	// claim: a live record answers (done: replay; in flight: 409); none
	// live, the caller records its own in-flight record.
	claim := func(actor string) (record int64, answer string) {
		var done, live int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'done'),
		                                    count(*) FILTER (WHERE state = 'in_flight' AND locked_until > now())
		                               FROM idem_request WHERE scope = $1 AND subject = $2 AND key = $3`,
			idemScope, idemUser, key).Scan(&done, &live)
		if err != nil {
			x.Error(actor, "look up key "+key, err)
			return 0, ""
		}
		switch {
		case done > 0:
			return 0, lab.Replayed
		case live > 0:
			return 0, "409 in flight"
		}
		// The fence column's default numbers the record: here it only
		// tells the caller's record apart, nobody compares it.
		err = d.pool.QueryRow(ctx, `INSERT INTO idem_request (scope, subject, key, fingerprint, state, locked_until)
		                            VALUES ($1, $2, $3, $4, 'in_flight', now() + interval '30 seconds') RETURNING fence`,
			idemScope, idemUser, key, fp[:]).Scan(&record)
		if err != nil {
			x.Error(actor, "claim key "+key, err)
			return 0, ""
		}
		return record, ""
	}
	// finish runs the effect and marks the caller's record done, whoever
	// holds the key by now.
	finish := func(actor string, record int64) {
		err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			status, body, err := debit30(ctx, tx, key)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE idem_request SET state = 'done', status = $4, content_type = 'application/json',
			                              body = $5, locked_until = NULL, finished_at = now()
			                        WHERE scope = $1 AND subject = $2 AND key = $3 AND fence = $6`,
				idemScope, idemUser, key, status, body, record)
			return err
		})
		if err != nil {
			x.Error(actor, "debit 30, finish", err)
			return
		}
		n, balance := d.effects(x, key)
		outcome := lab.Accepted
		if n > 1 {
			outcome = lab.Violates
		}
		x.Step(lab.Step{Actor: actor, Action: "debit 30, finish its record", Outcome: outcome,
			Note: fmt.Sprintf("%d effect rows for the key, balance %d", n, balance)})
	}

	recordA, _ := claim("client-A")
	if recordA == 0 {
		x.Errorf("client-A could not claim a fresh key")
		return
	}
	x.Step(lab.Step{Actor: "client-A", Action: "debit 30, key " + key + ": claim the record", Outcome: lab.Accepted})
	if x.Control {
		finish("client-A", recordA) // no stall: it finishes inside its lock
	} else {
		x.Step(lab.Step{Actor: "client-A", Action: "stall before its effect", Outcome: "paused"})
		tag, err := d.pool.Exec(ctx, `UPDATE idem_request SET locked_until = now() - interval '1 millisecond'
		                               WHERE key = $1 AND state = 'in_flight'`, key)
		require.NoError(x, err)
		require.EqualValues(x, 1, tag.RowsAffected())
		x.Step(lab.Step{Actor: "db", Action: "A's lock on the key expires (set with SQL)"})
	}
	recordB, answer := claim("client-B")
	if recordB != 0 {
		x.Step(lab.Step{Actor: "client-B", Action: "retry: the lock expired, claim the key with a record of its own", Outcome: lab.Accepted})
		finish("client-B", recordB)
	} else if answer != "" {
		x.Step(lab.Step{Actor: "client-B", Action: "retry: debit 30, same key", Outcome: answer})
	}
	if !x.Control {
		x.Step(lab.Step{Actor: "client-A", Action: "wake", Outcome: "resumed"})
		finish("client-A", recordA)
	}
	var records int
	require.NoError(x, d.pool.QueryRow(ctx, `SELECT count(*) FROM idem_request WHERE key = $1`, key).Scan(&records))
	n, balance := d.effects(x, key)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d records and %d effect rows for one key, balance %d", records, n, balance)})
	x.Figure("records", records)
	x.Figure("effects", n)
	x.Figure("balance", balance)
}

// stall sends a debit that pauses at point, and returns its reply channel,
// the gate and the fence it claimed. While its lock holds, a retry is told
// to wait.
func (d *idemDemo) stall(x *lab.X, point, key string) (<-chan lab.Response, *faults.Gate, int64) {
	x.Helper()
	gate := d.faults.Pause(point, key)
	x.Cleanup(gate.Release)
	done := make(chan lab.Response, 1)
	go func() {
		r, err := d.send(context.Background(), key)
		if err != nil {
			x.Errorf("A: %v", err)
		}
		done <- r
	}()
	lab.WaitOrTimeout(x, gate.Reached(), "A never reached %s", point)
	var fence int64
	require.NoError(x, d.pool.QueryRow(context.Background(),
		`SELECT fence FROM idem_request WHERE key = $1 AND state = 'in_flight'`, key).Scan(&fence))
	x.Step(lab.Step{Actor: "client-A", Action: "debit 30, key " + key + ": claim the record", Outcome: lab.Accepted, Fence: fence})
	x.Step(lab.Step{Actor: "client-A", Action: "stall at " + point, Outcome: "paused", Fence: fence})
	early := d.post(x, key)
	require.Equal(x, http.StatusConflict, early.Status)
	require.Equal(x, "idempotency_key_in_flight", early.Code())
	require.Equal(x, "1", early.Header.Get("Retry-After"))
	x.Step(lab.Step{Actor: "client-B", Action: "retry while A's lock holds", Outcome: lab.Refused, Note: "409 in flight, Retry-After: 1"})
	return done, gate, fence
}

// expire forces the record's lock expiry: an exact boundary, not a sleep.
func (d *idemDemo) expire(x *lab.X, key string, fence int64) {
	x.Helper()
	tag, err := d.pool.Exec(context.Background(),
		`UPDATE idem_request SET locked_until = now() - interval '1 millisecond' WHERE key = $1 AND state = 'in_flight'`, key)
	require.NoError(x, err)
	require.EqualValues(x, 1, tag.RowsAffected())
	x.Step(lab.Step{Actor: "db", Action: "A's lock on the key expires (set with SQL)", Fence: fence})
}

// takenOver checks the record finished under a newer fence than fenceA.
func (d *idemDemo) takenOver(x *lab.X, key string, fenceA int64) int64 {
	x.Helper()
	var fence int64
	var takeovers int
	require.NoError(x, d.pool.QueryRow(context.Background(),
		`SELECT fence, takeovers FROM idem_request WHERE key = $1 AND state = 'done'`, key).Scan(&fence, &takeovers))
	require.Greater(x, fence, fenceA)
	require.Equal(x, 1, takeovers)
	return fence
}

// requireOneEffect: one effect row for the key, and the record replays want.
func (d *idemDemo) requireOneEffect(x *lab.X, key string, want []byte) {
	x.Helper()
	n, _ := d.effects(x, key)
	require.Equal(x, 1, n, "the stalled request's effect rolled back with its refused finish")
	after := d.post(x, key)
	require.True(x, replayed(after))
	require.Equal(x, want, after.Body)
	x.Step(lab.Step{Actor: "db", Action: "re-read: one effect row for " + key + "; a further retry is the replay", Outcome: lab.Replayed})
}
