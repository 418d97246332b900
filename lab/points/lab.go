package points

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/points"
)

// Experiments are the points chapter's runnable claims (fencelab lab run …).
var Experiments = []lab.Experiment{ConcurrentDebits, LostResponse, KeyReused, SameKeyConcurrently, CorruptedBalance, Interleaved}

// ConcurrentDebits is PTS-01: 100 concurrent debits of 30 against a balance
// of 1,000 over real HTTP. Exactly 33 fit; 67 are refused and the balance
// ends at 10, never below 0 on the way.
//
// The naive version is the book's check-then-act on a schema without the
// CHECK: each client reads the balance, decides in Go that 30 fit, then
// subtracts. Every client reads 1,000 before anyone writes, so all 100
// subtract and PTS-I1 reports the account at −2,000 (PTS-S1 the missing
// CHECK, which alone decides nothing: the control, one client, holds).
var ConcurrentDebits = lab.Experiment{
	ID:         "points/concurrent-debits",
	Test:       "TestPTS01ConcurrentDebitsNeverOverdraw",
	Claim:      "100 concurrent debits of 30 against 1,000: exactly 33 succeed, the balance ends at 10 and is never negative",
	Overlap:    true,
	Invariants: []string{"points", "idem"},
	Naive:      "read the balance, check it in Go, then subtract — no guard in the UPDATE, no CHECK on the table",
	Catches:    []string{"PTS-I1"},
	Control:    "the same read-check-subtract by one client: nothing interleaves, the balance ends at 970",
	Run:        runConcurrentDebits,
	Explore:    concurrentDebitsExplore,
}

func runConcurrentDebits(x *lab.X) {
	const (
		clients = 100
		amount  = 30
		opening = 1000
		account = "acct-0042"
	)
	l := StartLab(x, lab.Options{})
	a := l.App
	openAccount(x, l, account, "user-0042", opening)

	if x.Naive {
		n := clients
		if x.Control {
			n = 1 // the race taken out: one client
		}
		naiveDebits(x, a, account, n, amount)
		return
	}
	tok := a.Token(x, "user-0042", httpx.RoleUser)
	var (
		mu      sync.Mutex
		outcome = map[string]int{}
	)
	lab.AtOnce(clients, func(i int) {
		actor := fmt.Sprintf("client-%03d", i+1)
		key := "k-" + rand.Text()
		// A 503 overloaded is the admission limiter shedding the request
		// before it reached the handler (Retry-After): the client retries
		// it with the same key, as the contract says, until it gets the
		// debit's own answer. Only those answers are the claim's.
		r, overload, err := labkit.SendPastOverload(context.Background(), a, lab.Req{Method: "POST", Path: "/points/accounts/" + account + "/debits",
			Token: tok, Body: points.PostingRequest{Amount: amount, Reason: "prize-17"},
			Headers: map[string]string{idem.Header: key}})
		step := lab.Step{Actor: actor, Action: fmt.Sprintf("debit %d", amount)}
		if overload > 0 {
			step.Action += fmt.Sprintf(" (after %d × 503 overloaded)", overload)
		}
		switch {
		case err != nil:
			step.Outcome, step.Note = "transport error", err.Error()
		case r.Status == http.StatusCreated:
			var txn points.Txn
			r.JSON(x, &txn)
			step.Outcome, step.Note = lab.Accepted, fmt.Sprintf("balance %d", txn.Balance)
		default:
			step.Outcome, step.Note = lab.Refused, r.Code()
		}
		x.Step(step)
		mu.Lock()
		if step.Outcome == lab.Accepted {
			outcome["created"]++
		} else if step.Note == "insufficient_balance" {
			outcome["insufficient_balance"]++
		}
		mu.Unlock()
	})

	var balance, version, debits int64
	require.NoError(x, a.Pool.QueryRow(context.Background(),
		`SELECT balance, version FROM points_account WHERE id = $1`, account).Scan(&balance, &version))
	require.NoError(x, a.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM points_ledger_txn WHERE kind = 'debit' AND client_id = 'user-0042'`).Scan(&debits))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: balance %d, %d debit transactions", balance, debits), Fence: version})
	x.Figure("debits_accepted", outcome["created"])
	x.Figure("debits_refused", outcome["insufficient_balance"])
	x.Figure("balance", balance)
	require.Equal(x, opening/amount, outcome["created"], "exactly ⌊1000/30⌋ debits fit")
	require.Equal(x, clients-opening/amount, outcome["insufficient_balance"])
	require.EqualValues(x, opening%amount, balance)
	require.EqualValues(x, opening/amount, debits)
	require.EqualValues(x, 1+opening/amount, version, "one grant and 33 debits changed the row")
}

// openAccount is a run's opening step: the admin opens account id for
// owner with balance points (OpenAccount), on the timeline.
func openAccount(x *lab.X, l *Lab, id, owner string, balance int64) {
	x.Helper()
	l.OpenAccount(x, id, owner, balance)
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("open %s with %d points", id, balance), Outcome: lab.Accepted})
}

// naiveDebitStmt is sqlDebit without its guard (AND balance >= @amount):
// the naive experiment's write, the product's statement otherwise.
var naiveDebitStmt = pg.MustNamed(strings.Replace(points.SQLDebit, "AND balance >= @amount", "", 1))

// naiveDebits is check-then-act without the guard: the product never does
// this; the experiment does it to the scratch database to show what the
// CHECK and the guarded UPDATE prevent (PTS-I1).
func naiveDebits(x *lab.X, a *lab.App, account string, clients int, amount int64) {
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, `ALTER TABLE points_account DROP CONSTRAINT balance_non_negative`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: CHECK (balance >= 0) dropped"})
	var read sync.WaitGroup // every client has read before anyone writes
	read.Add(clients)
	lab.AtOnce(clients, func(i int) {
		actor := fmt.Sprintf("client-%03d", i+1)
		var balance int64
		err := a.Pool.QueryRow(ctx, `SELECT balance FROM points_account WHERE id = $1`, account).Scan(&balance)
		read.Done()
		if err != nil {
			x.Error(actor, "read balance", err)
			return
		}
		read.Wait()
		if balance < amount {
			x.Step(lab.Step{Actor: actor, Action: fmt.Sprintf("read %d, debit %d", balance, amount), Outcome: lab.Refused})
			return
		}
		// The product's debit, ledger and all, minus its guard: the
		// decision was taken in Go on the balance read above.
		t, err := naiveDebit(ctx, a.Pool, naiveDebitStmt, account, NewKey(), amount)
		after := t.Balance
		action := fmt.Sprintf("read %d, debit %d", balance, amount)
		if err != nil {
			x.Error(actor, action, err)
			return
		}
		outcome := lab.Accepted
		if after < 0 {
			outcome = lab.Violates // observed: the balance it left is negative
		}
		x.Step(lab.Step{Actor: actor, Action: action, Outcome: outcome, Note: fmt.Sprintf("balance %d", after)})
	})
	reReadBalance(x, a, account)
}

// debitArgs are the debit statement's arguments for a debit of amount
// from account by user-0042 with key.
func debitArgs(account, key string, amount int64) pgx.NamedArgs {
	return pgx.NamedArgs{
		"account": account, "amount": amount, "client": "user-0042", "key": key,
		"reason": "prize-17", "system": points.RedemptionAccount, "shard": 0,
	}
}

// naiveDebit runs a debit statement (the product's, or naiveDebitStmt) in
// a transaction of its own, as the naive versions do: no idempotency
// record with it. It returns the transaction the statement wrote, or an
// error when it matched no row.
func naiveDebit(ctx context.Context, pool *pgxpool.Pool, stmt pg.Named, account, key string, amount int64) (points.Txn, error) {
	var t points.Txn
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, stmt.SQL, stmt.Args(debitArgs(account, key, amount))...).Scan(&t.ID, &t.CreatedAt, &t.Balance, &t.Version)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("points: naive debit of %s matched no row", account)
		}
		return err
	})
	return t, err
}

// reReadBalance is a debit run's last word: the account's balance read
// again from the database, on the timeline and as the figure "balance".
func reReadBalance(x *lab.X, a *lab.App, account string) int64 {
	var balance int64
	require.NoError(x, a.Pool.QueryRow(context.Background(), `SELECT balance FROM points_account WHERE id = $1`, account).Scan(&balance))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: balance %d", balance)})
	x.Figure("balance", balance)
	return balance
}

// LostResponse is PTS-02: the server commits a debit, then the response is
// lost — the handler is held after the commit until the client has given
// up. The client's retry with the same key makes no second transaction; it
// gets the recorded response, byte for byte, marked Idempotent-Replayed.
//
// The naive version keeps no reply: the same debit statement, no
// idempotency record, a ledger without its unique (client, key). The
// retry debits again and PTS-I2 reports the key's two transactions; its
// control, whose answer is not lost, debits once.
var LostResponse = lab.Experiment{
	ID:         "points/lost-response",
	Test:       "TestPTS02LostResponseRetryIsReplayedNotDebitedTwice",
	Claim:      "a debit whose response is lost after its commit is retried with the same key: the retry is the recorded answer, not a second debit",
	Invariants: []string{"points", "idem"},
	Naive:      "a debit handler without the recorded reply (no idempotency record, no unique key in the ledger): the retry is a second debit",
	Catches:    []string{"PTS-I2"},
	Control:    "the same handler without the lost response: the client reads its answer and does not retry, one debit, balance 970",
	Run:        runLostResponse,
}

func runLostResponse(x *lab.X) {
	l := StartLab(x, lab.Options{})
	ctx := context.Background()
	openAccount(x, l, "acct-0042", "user-0042", 1000)
	if x.Naive {
		naiveLostResponse(x, l.App, "acct-0042", NewKey())
		return
	}
	tok := l.Token(x, "user-0042", httpx.RoleUser)
	key := NewKey()

	gate := l.Faults.Pause(idem.PointAfterCommit, key)
	x.Cleanup(gate.Release)
	reqCtx, giveUp := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := l.Posting(reqCtx, "debits", tok, "acct-0042", key, 30, "prize-17")
		first <- err
	}()
	// Reached: committed; the response is not written yet.
	lab.WaitOrTimeout(x, gate.Reached(), "the debit never reached the after-commit point")
	require.Equal(x, 1, l.TxnsOf(x, "user-0042", key), "the debit committed before the response was lost")
	x.Step(lab.Step{Actor: "client", Action: "debit 30, key " + key, Outcome: "committed", Note: "the server holds the response"})
	giveUp() // the client's timeout: it never sees the answer
	require.ErrorIs(x, <-first, context.Canceled)
	x.Step(lab.Step{Actor: "client", Action: "time out waiting for the answer", Outcome: lab.Lost})

	r := l.Debit(x, tok, "acct-0042", key, 30)
	require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(x, "true", r.Header.Get(idem.ReplayedHeader))
	var recorded []byte
	require.NoError(x, l.Pool.QueryRow(ctx,
		`SELECT body FROM idem_request WHERE scope = 'points.debit' AND subject = 'user-0042' AND key = $1 AND state = 'done'`, key).Scan(&recorded))
	require.Equal(x, string(recorded), string(r.Body), "the replay is the response the lost request recorded")
	var txn points.Txn
	r.JSON(x, &txn)
	x.Step(lab.Step{Actor: "client", Action: "retry: debit 30, same key", Outcome: lab.Replayed, Note: fmt.Sprintf("transaction %d, balance %d", txn.ID, txn.Balance)})
	var id int64
	require.NoError(x, l.Pool.QueryRow(ctx,
		`SELECT id FROM points_ledger_txn WHERE client_id = 'user-0042' AND idem_key = $1`, key).Scan(&id))
	require.Equal(x, id, txn.ID, "the replay names the one transaction")
	require.EqualValues(x, 970, txn.Balance)

	// And again: still one transaction, still the same bytes.
	again := l.Debit(x, tok, "acct-0042", key, 30)
	require.Equal(x, r.Body, again.Body)
	x.Step(lab.Step{Actor: "client", Action: "retry again", Outcome: lab.Replayed, Note: "the same bytes"})
	txns := l.TxnsOf(x, "user-0042", key)
	balance := l.Account(x, "acct-0042").Balance
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d transaction for the key, balance %d", txns, balance)})
	x.Figure("requests", 3)
	x.Figure("transactions", txns)
	x.Figure("balance", balance)
	require.Equal(x, 1, txns)
	require.EqualValues(x, 970, balance)
}

// naiveLostResponse is a debit handler that keeps no reply: the
// product's debit statement (points.SQLDebit, guard and all) in its own
// transaction, without the idempotency record that answers a retry and on
// a ledger without its unique (client, key) — the naive schema. The
// client's first request commits and its answer is lost on the way back;
// the client retries with the same key and the handler debits again.
// PTS-I2 reports the key with two transactions. In the control the answer
// arrives: the client does not retry and the same handler debits once.
func naiveLostResponse(x *lab.X, a *lab.App, account, key string) {
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, `ALTER TABLE points_ledger_txn DROP CONSTRAINT points_ledger_txn_client_key`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: UNIQUE (client_id, idem_key) on the ledger dropped"})
	serve := func() (points.Txn, error) { return naiveDebit(ctx, a.Pool, guardedDebitStmt, account, key, 30) }
	first, err := serve()
	if err != nil {
		x.Error("client", "debit 30, key "+key, err)
		return
	}
	if x.Control {
		x.Step(lab.Step{Actor: "client", Action: "debit 30, key " + key, Outcome: lab.Accepted,
			Note: fmt.Sprintf("transaction %d, balance %d: the answer arrives, no retry", first.ID, first.Balance)})
	} else {
		x.Step(lab.Step{Actor: "client", Action: "debit 30, key " + key, Outcome: "committed",
			Note: fmt.Sprintf("transaction %d; the answer is lost on the way back", first.ID)})
		x.Step(lab.Step{Actor: "client", Action: "time out waiting for the answer", Outcome: lab.Lost})
		again, err := serve()
		if err != nil {
			x.Error("client", "retry: debit 30, same key", err)
			return
		}
		outcome := lab.Accepted
		if again.ID != first.ID {
			outcome = lab.Violates
		}
		x.Step(lab.Step{Actor: "client", Action: "retry: debit 30, same key", Outcome: outcome,
			Note: fmt.Sprintf("transaction %d, balance %d: nothing recorded the first answer", again.ID, again.Balance)})
	}
	var txns, balance int64
	require.NoError(x, a.Pool.QueryRow(ctx,
		`SELECT count(*) FROM points_ledger_txn WHERE client_id = 'user-0042' AND idem_key = $1`, key).Scan(&txns))
	require.NoError(x, a.Pool.QueryRow(ctx, `SELECT balance FROM points_account WHERE id = $1`, account).Scan(&balance))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d transactions for the key, balance %d", txns, balance)})
	x.Figure("transactions", txns)
	x.Figure("balance", balance)
}

// KeyReused is PTS-03: the same key with a different amount (or on another
// account) is another request: 422 idempotency_key_reused, nothing written.
var KeyReused = lab.Experiment{
	ID:         "points/key-reused",
	Test:       "TestPTS03SameKeyOtherAmountIsRefusedAndWritesNothing",
	Claim:      "a key re-used for another amount or another account is refused with 422 and writes nothing",
	Invariants: []string{"points", "idem"},
	Run:        runKeyReused,
}

func runKeyReused(x *lab.X) {
	l := StartLab(x, lab.Options{})
	openAccount(x, l, "acct-0042", "user-0042", 1000)
	tok := l.Token(x, "user-0042", httpx.RoleUser)
	key := NewKey()

	r := l.Debit(x, tok, "acct-0042", key, 30)
	require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
	x.Step(lab.Step{Actor: "client", Action: "debit 30 from acct-0042, key " + key, Outcome: lab.Accepted})

	before := l.Ledger(x)
	r = l.Debit(x, tok, "acct-0042", key, 40)
	require.Equal(x, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(x, "idempotency_key_reused", r.Code())
	require.Equal(x, before, l.Ledger(x), "nothing written")
	x.Step(lab.Step{Actor: "client", Action: "debit 40 from acct-0042, same key", Outcome: lab.Refused, Note: "422 idempotency_key_reused; nothing written"})

	// The same key on another account is another request too.
	l.OpenAccount(x, "acct-0043", "user-0042", 1000)
	before = l.Ledger(x)
	r = l.Debit(x, tok, "acct-0043", key, 30)
	require.Equal(x, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(x, "idempotency_key_reused", r.Code())
	require.Equal(x, before, l.Ledger(x), "nothing written")
	x.Step(lab.Step{Actor: "client", Action: "debit 30 from acct-0043, same key", Outcome: lab.Refused, Note: "422 idempotency_key_reused; nothing written"})

	txns, balance := l.TxnsOf(x, "user-0042", key), l.Account(x, "acct-0042").Balance
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d transaction for the key, acct-0042 balance %d", txns, balance)})
	x.Figure("transactions", txns)
	x.Figure("refused", 2)
	require.Equal(x, 1, txns)
	require.EqualValues(x, 970, balance)
}

// SameKeyConcurrently is PTS-04: the same key sent twice at once. Timeline
// first: the first request holds its key (claimed, effect not begun) while
// the second arrives and is told 409 in flight; then a free-for-all of 20
// copies. Either way: one 201 that did the work, the rest 409 or the
// replay, and one transaction.
var SameKeyConcurrently = lab.Experiment{
	ID:         "points/same-key-concurrently",
	Test:       "TestPTS04SameKeyConcurrentlyMakesOneTransaction",
	Claim:      "one key sent by many clients at once makes one ledger transaction; the others get 409 in flight or the replay",
	Overlap:    true,
	Invariants: []string{"points", "idem"},
	Run:        runSameKeyConcurrently,
}

func runSameKeyConcurrently(x *lab.X) {
	l := StartLab(x, lab.Options{})
	openAccount(x, l, "acct-0042", "user-0042", 1000)
	tok := l.Token(x, "user-0042", httpx.RoleUser)

	{ // the timeline
		key := NewKey()
		gate := l.Faults.Pause(idem.PointBeforeEffect, key)
		x.Cleanup(gate.Release)
		first := make(chan lab.Response, 1)
		go func() {
			r, err := l.Posting(context.Background(), "debits", tok, "acct-0042", key, 30, "prize-17")
			if err != nil {
				x.Errorf("first: %v", err)
			}
			first <- r
		}()
		lab.WaitOrTimeout(x, gate.Reached(), "the first request never claimed its key")
		x.Step(lab.Step{Actor: "client-1", Action: "debit 30, key " + key + ": claim the key; held before the effect", Outcome: "paused"})
		second := l.Debit(x, tok, "acct-0042", key, 30)
		require.Equal(x, http.StatusConflict, second.Status, string(second.Body))
		require.Equal(x, "idempotency_key_in_flight", second.Code())
		require.NotEmpty(x, second.Header.Get("Retry-After"))
		x.Step(lab.Step{Actor: "client-2", Action: "debit 30, same key", Outcome: lab.Refused, Note: "409 idempotency_key_in_flight"})
		gate.Release()
		r := <-first
		require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
		require.Empty(x, r.Header.Get(idem.ReplayedHeader))
		x.Step(lab.Step{Actor: "client-1", Action: "resume: debit", Outcome: lab.Accepted})
		require.Equal(x, 1, l.TxnsOf(x, "user-0042", key))
	}
	{ // the race
		key := NewKey()
		const n = 20
		results := make([]lab.Response, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		fire := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-fire
				results[i], errs[i] = l.Posting(context.Background(), "debits", tok, "acct-0042", key, 30, "prize-17")
			})
		}
		close(fire)
		wg.Wait()
		require.NoError(x, errors.Join(errs...))
		firsts, replays, inFlight := 0, 0, 0
		var body []byte
		for _, r := range results {
			switch {
			case r.Status == http.StatusCreated && r.Header.Get(idem.ReplayedHeader) == "":
				firsts++
				body = r.Body
			case r.Status == http.StatusCreated:
				replays++
			case r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_flight":
				inFlight++
			default:
				x.Fatalf("unexpected answer %d %s", r.Status, r.Body)
			}
		}
		x.Step(lab.Step{Actor: "clients", Action: fmt.Sprintf("%d copies of one debit, key %s, at once", n, key), Outcome: lab.Accepted,
			Note: fmt.Sprintf("1 ran it, %d replayed, %d in flight", replays, inFlight)})
		require.Equal(x, 1, firsts, "exactly one request did the work")
		require.Equal(x, n, firsts+replays+inFlight)
		for _, r := range results {
			if r.Status == http.StatusCreated {
				require.Equal(x, string(body), string(r.Body), "replays are the first response")
			}
		}
		require.Equal(x, 1, l.TxnsOf(x, "user-0042", key))
		x.Figure("race_requests", n)
		x.Figure("race_transactions", 1)
	}
	balance := l.Account(x, "acct-0042").Balance
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: two keys, two transactions, balance %d", balance)})
	x.Figure("balance", balance)
	require.EqualValues(x, 1000-2*30, balance)
}

// CorruptedBalance is PTS-05: code corrupts a balance column. PTS-I4
// reports exactly that account with its drift — from the built `fencelab
// check`, which exits 1 — and recompute finds it, repairs it under the
// account's lock and records the repair; then PTS-I4 holds.
var CorruptedBalance = lab.Experiment{
	ID:         "points/corrupted-balance",
	Test:       "TestPTS05CorruptedBalanceIsReportedAndRepairedFromTheLedger",
	Claim:      "a balance changed behind the ledger's back is reported by PTS-I4 and repaired from the ledger, on record",
	Invariants: []string{"points"},
	NoNaive:    "the fault is the corruption itself (a balance changed behind the ledger): there is no weaker check to run beside PTS-I4",
	Run:        runCorruptedBalance,
}

func runCorruptedBalance(x *lab.X) {
	l := StartLab(x, lab.Options{})
	ctx := context.Background()
	l.OpenAccount(x, "acct-0042", "user-0042", 1000)
	l.OpenAccount(x, "acct-0043", "user-0043", 500)
	tok := l.Token(x, "user-0042", httpx.RoleUser)
	require.Equal(x, http.StatusCreated, l.Debit(x, tok, "acct-0042", NewKey(), 30).Status)
	x.Step(lab.Step{Actor: "admin", Action: "open acct-0042 (1000) and acct-0043 (500); user-0042 debits 30", Outcome: lab.Accepted})

	// The bug: some code adds 29 points behind the ledger's back, and
	// another one loses 7 on the system side.
	_, err := l.Pool.Exec(ctx, `UPDATE points_account SET balance = balance + 29 WHERE id = 'acct-0042'`)
	require.NoError(x, err)
	_, err = l.Pool.Exec(ctx, `UPDATE points_system_shard SET balance = balance - 7 WHERE account_id = 'sys:redemption' AND shard = 5`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "bug", Action: "acct-0042 balance += 29, sys:redemption shard 5 −= 7, no ledger entries", Outcome: lab.Violates})

	// The built binary, as an operator runs it.
	check := func() (string, int) {
		cmd := exec.Command(x.Env.Binary(x.T), "check", "points")
		cmd.Env = x.Env.ChildEnv(l.DBURL)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(x, err, "%s", out)
		return string(out), 0
	}
	out, code := check()
	require.Equal(x, 1, code, "%s", out)
	require.Contains(x, out, "FAIL  PTS-I4")
	require.Contains(x, out, "acct-0042 | user | 999 | 970 | 29")
	require.Contains(x, out, "sys:redemption | system | 23 | 30 | -7")
	require.Contains(x, out, "1 violated")
	x.Step(lab.Step{Actor: "admin", Action: "fencelab check points", Outcome: "exit 1", Note: "PTS-I4: acct-0042 drift 29, sys:redemption drift −7"})

	// The admin's recompute, as an operator calls it over HTTP.
	recompute := func(query string) points.RecomputeReport {
		r := l.Do(x, lab.Req{Method: "POST", Path: "/points/admin/recompute" + query, Token: l.Admin})
		require.Equal(x, http.StatusOK, r.Status, string(r.Body))
		var rep points.RecomputeReport
		r.JSON(x, &rep)
		return rep
	}

	// Recompute without repair reports and changes nothing.
	rep := recompute("")
	require.Equal(x, points.RecomputeReport{Checked: 4, Drifted: 2, Accounts: []points.Drift{
		{AccountID: "acct-0042", Kind: "user", Stored: 999, FromEntries: 970, Drift: 29},
		{AccountID: "sys:redemption", Kind: "system", Stored: 23, FromEntries: 30, Drift: -7},
	}}, rep)
	require.EqualValues(x, 999, l.Account(x, "acct-0042").Balance)
	x.Step(lab.Step{Actor: "admin", Action: "POST /points/admin/recompute", Outcome: "2 drifted", Note: "reported, nothing changed"})

	// One account at a time, with repair.
	rep = recompute("?account=acct-0042&repair=true")
	require.Equal(x, 1, rep.Checked)
	require.Equal(x, 1, rep.Repaired)
	require.Len(x, rep.Accounts, 1)
	require.True(x, rep.Accounts[0].Repaired)
	require.EqualValues(x, 29, rep.Accounts[0].Drift)
	require.EqualValues(x, 970, l.Account(x, "acct-0042").Balance)
	x.Step(lab.Step{Actor: "admin", Action: "recompute acct-0042 with repair", Outcome: "repaired", Note: "999 → 970, from the ledger"})

	// Then everything else.
	rep = recompute("?repair=true")
	require.Equal(x, 1, rep.Repaired)
	require.Equal(x, "sys:redemption", rep.Accounts[0].AccountID)
	require.EqualValues(x, 30, l.Account(x, points.RedemptionAccount).Balance)
	x.Step(lab.Step{Actor: "admin", Action: "recompute everything with repair", Outcome: "repaired", Note: "sys:redemption 23 → 30"})

	// Each repair is on record, append-only.
	rows, err := l.Pool.Query(ctx, `SELECT account_id, stored, recomputed, actor FROM points_repair ORDER BY id`)
	require.NoError(x, err)
	var repairs []string
	for rows.Next() {
		var id, actor string
		var stored, recomputed int64
		require.NoError(x, rows.Scan(&id, &stored, &recomputed, &actor))
		b, _ := json.Marshal([]int64{stored, recomputed})
		repairs = append(repairs, strings.Join([]string{id, actor}, " by ")+" "+string(b))
	}
	require.NoError(x, rows.Err())
	require.Equal(x, []string{"acct-0042 by admin-0001 [999,970]", "sys:redemption by admin-0001 [23,30]"}, repairs)
	x.Step(lab.Step{Actor: "db", Action: "re-read points_repair: " + strings.Join(repairs, "; ")})

	// Nothing left to repair; the binary agrees.
	rep = recompute("?repair=true")
	require.Equal(x, points.RecomputeReport{Checked: 4, Accounts: []points.Drift{}}, rep)
	out, code = check()
	require.Equal(x, 0, code, "%s", out)
	x.Step(lab.Step{Actor: "admin", Action: "fencelab check points", Outcome: "exit 0"})
	x.Figure("drifted", 2)
	x.Figure("repaired", len(repairs))
}

// Interleaved is PTS-06: grants and debits interleaved from 16 clients over
// 50 accounts (seeded; the seed is logged so a failure can be replayed),
// some requests retried with their key. Every invariant holds, every
// balance is what the 201s add up to, and the system accounts balance the
// users.
var Interleaved = lab.Experiment{
	ID:         "points/interleaved",
	Test:       "TestPTS06InterleavedGrantsAndDebitsKeepTheBooksBalanced",
	Claim:      "16 clients interleave grants, debits and retries over 50 accounts: every balance is what its 201s add up to, and the books balance",
	Invariants: []string{"points", "idem"},
	Run:        runInterleaved,
}

func runInterleaved(x *lab.X) {
	l := StartLab(x, lab.Options{})
	seed := time.Now().UnixNano()
	x.Logf("seed %d", seed)

	const accounts, clients, opsPerClient, opening = 50, 16, 120, 300
	accountID := func(i int) string { return fmt.Sprintf("acct-%04d", i) }
	tokens := make([]string, accounts)
	for i := range accounts {
		owner := fmt.Sprintf("user-%04d", i)
		l.OpenAccount(x, accountID(i), owner, opening)
		tokens[i] = l.Token(x, owner, httpx.RoleUser)
	}
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("open %d accounts with %d points each", accounts, opening), Outcome: lab.Accepted})
	svc := l.Token(x, "svc-0001", httpx.RoleService)

	// delta[i] is what the answered 201s say account i gained or lost.
	var mu sync.Mutex
	delta := make([]int64, accounts)
	var granted, debited, refused, replayed int64
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(seed), uint64(c)))
			var mine struct{ grants, debits, refused, retries int }
			defer func() {
				mu.Lock()
				replayed += int64(mine.retries)
				mu.Unlock()
				x.Step(lab.Step{Actor: fmt.Sprintf("client-%02d", c+1), Action: fmt.Sprintf("%d postings at random accounts", opsPerClient),
					Outcome: lab.Accepted, Note: fmt.Sprintf("%d grants, %d debits, %d refused, %d retries replayed", mine.grants, mine.debits, mine.refused, mine.retries)})
			}()
			for range opsPerClient {
				i := rng.IntN(accounts)
				amount := int64(1 + rng.IntN(60))
				kind, tok, sign := "debits", tokens[i], int64(-1)
				if rng.IntN(3) == 0 {
					kind, tok, sign = "grants", svc, 1
				}
				key := NewKey()
				r, err := l.Posting(context.Background(), kind, tok, accountID(i), key, amount, "pts-06")
				if err != nil {
					errs[c] = fmt.Errorf("%s %s: %w", kind, accountID(i), err)
					return
				}
				if rng.IntN(5) == 0 { // a client that retries anyway
					again, err := l.Posting(context.Background(), kind, tok, accountID(i), key, amount, "pts-06")
					if err != nil || again.Header.Get(idem.ReplayedHeader) != "true" || string(again.Body) != string(r.Body) {
						errs[c] = fmt.Errorf("retry of %s was not the replay: %d %s (%v)", key, again.Status, again.Body, err)
						return
					}
					mine.retries++
				}
				mu.Lock()
				switch {
				case r.Status == http.StatusCreated && sign > 0:
					delta[i] += amount
					granted += amount
					mine.grants++
				case r.Status == http.StatusCreated:
					delta[i] -= amount
					debited += amount
					mine.debits++
				case r.Status == http.StatusConflict && r.Code() == "insufficient_balance":
					refused++
					mine.refused++
				default:
					errs[c] = fmt.Errorf("%s %s: %d %s", kind, accountID(i), r.Status, r.Body)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(x, errors.Join(errs...))

	var users int64
	for i := range accounts {
		a := l.Account(x, accountID(i))
		require.Equal(x, opening+delta[i], a.Balance, accountID(i))
		require.GreaterOrEqual(x, a.Balance, int64(0))
		users += a.Balance
	}
	issuance, redemption := l.Account(x, points.IssuanceAccount), l.Account(x, points.RedemptionAccount)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: users hold %d, issuance %d, redemption %d (sum %d)",
		users, issuance.Balance, redemption.Balance, users+issuance.Balance+redemption.Balance)})
	x.Figure("granted", granted)
	x.Figure("debited", debited)
	x.Figure("refused", refused)
	x.Figure("replayed", replayed)
	x.Figure("books_sum", users+issuance.Balance+redemption.Balance)
	require.Equal(x, -(accounts*opening + granted), issuance.Balance)
	require.Equal(x, debited, redemption.Balance)
	require.Zero(x, users+issuance.Balance+redemption.Balance, "the system accounts balance the user accounts")

	// Every ledger transaction appended exactly one outbox event, of its
	// kind, carrying its id, and no event names none.
	var txns, events, matched int
	require.NoError(x, l.Pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM points_ledger_txn),
       (SELECT count(*) FROM outbox_event WHERE topic IN ('points.debited', 'points.granted')),
       (SELECT count(DISTINCT t.id) FROM points_ledger_txn t
          JOIN outbox_event e ON (e.payload ->> 'id')::bigint = t.id
                             AND e.topic = CASE t.kind WHEN 'debit' THEN 'points.debited' ELSE 'points.granted' END
                             AND e.payload ->> 'account_id' = e.key)`).Scan(&txns, &events, &matched))
	require.Positive(x, txns)
	require.Equal(x, []int{txns, txns}, []int{events, matched})
}
