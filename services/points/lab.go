package points

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"sync"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lab"
)

// Experiments are the points chapter's runnable claims (fencelab lab run …).
var Experiments = []lab.Experiment{ConcurrentDebits}

// ConcurrentDebits is PTS-01: 100 concurrent debits of 30 against a balance
// of 1,000 over real HTTP. Exactly 33 fit; 67 are refused and the balance
// ends at 10, never below 0 on the way.
//
// The naive version is the book's check-then-act on a schema without the
// CHECK: each client reads the balance, decides in Go that 30 fit, then
// subtracts. Every client reads 1,000 before anyone writes, so all 100
// subtract and PTS-I1 reports the account at −2,000 (and the missing CHECK).
var ConcurrentDebits = lab.Experiment{
	ID:         "points/concurrent-debits",
	Test:       "TestPTS01ConcurrentDebitsNeverOverdraw",
	Claim:      "100 concurrent debits of 30 against 1,000: exactly 33 succeed, the balance ends at 10 and is never negative",
	Invariants: []string{"points", "idem"},
	Naive:      "read the balance, check it in Go, then subtract — no guard in the UPDATE, no CHECK on the table",
	Catches:    []string{"PTS-I1"},
	Run:        runConcurrentDebits,
}

func runConcurrentDebits(x *lab.X) {
	const (
		clients = 100
		amount  = 30
		opening = 1000
		account = "acct-0042"
	)
	a := x.Start(lab.Options{})
	admin := a.Token(x, "admin-0001", httpx.RoleAdmin)
	openAccount(x, a, admin, account, "user-0042", opening)
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("open %s with %d points", account, opening), Outcome: lab.Accepted})

	if x.Naive {
		naiveDebits(x, a, account, clients, amount)
		return
	}
	tok := a.Token(x, "user-0042", httpx.RoleUser)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		outcome = map[string]int{}
		release = make(chan struct{})
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release // all at once
			actor := fmt.Sprintf("client-%03d", i+1)
			r, err := a.Send(context.Background(), lab.Req{Method: "POST", Path: "/points/accounts/" + account + "/debits",
				Token: tok, Body: PostingRequest{Amount: amount, Reason: "prize-17"},
				Headers: map[string]string{idem.Header: "k-" + rand.Text()}})
			step := lab.Step{Actor: actor, Action: fmt.Sprintf("debit %d", amount)}
			switch {
			case err != nil:
				step.Outcome, step.Note = "transport error", err.Error()
			case r.Status == http.StatusCreated:
				var txn Txn
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
		}()
	}
	close(release)
	wg.Wait()

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

// naiveDebits is check-then-act without the guard: the product never does
// this; the experiment does it to the scratch database to show what the
// CHECK and the guarded UPDATE prevent (PTS-I1).
func naiveDebits(x *lab.X, a *lab.App, account string, clients int, amount int64) {
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, `ALTER TABLE points_account DROP CONSTRAINT balance_non_negative`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "drop CHECK (balance >= 0): the naive schema", Outcome: lab.Violates})
	var (
		wg      sync.WaitGroup
		read    sync.WaitGroup // every client has read before anyone writes
		release = make(chan struct{})
	)
	read.Add(clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actor := fmt.Sprintf("client-%03d", i+1)
			<-release
			var balance int64
			err := a.Pool.QueryRow(ctx, `SELECT balance FROM points_account WHERE id = $1`, account).Scan(&balance)
			read.Done()
			if err != nil {
				x.Step(lab.Step{Actor: actor, Action: "read balance", Outcome: "error", Note: err.Error()})
				return
			}
			read.Wait()
			if balance < amount {
				x.Step(lab.Step{Actor: actor, Action: fmt.Sprintf("read %d, debit %d", balance, amount), Outcome: lab.Refused})
				return
			}
			var after int64
			err = a.Pool.QueryRow(ctx, `UPDATE points_account SET balance = balance - $2 WHERE id = $1 RETURNING balance`,
				account, amount).Scan(&after)
			step := lab.Step{Actor: actor, Action: fmt.Sprintf("read %d, debit %d", balance, amount), Outcome: lab.Violates,
				Note: fmt.Sprintf("balance %d", after)}
			if err != nil {
				step.Outcome, step.Note = "error", err.Error()
			}
			x.Step(step)
		}()
	}
	close(release)
	wg.Wait()
	var balance int64
	require.NoError(x, a.Pool.QueryRow(ctx, `SELECT balance FROM points_account WHERE id = $1`, account).Scan(&balance))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: balance %d", balance)})
	x.Figure("balance", balance)
}

// openAccount creates a user account over HTTP and grants it balance.
func openAccount(x *lab.X, a *lab.App, admin, id, owner string, balance int64) {
	x.Helper()
	r := a.Do(x, lab.Req{Method: "POST", Path: "/points/accounts", Token: admin,
		Body: CreateAccountRequest{ID: id, Owner: owner}})
	require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
	for left := balance; left > 0; left -= MaxAmount {
		r := a.Do(x, lab.Req{Method: "POST", Path: "/points/accounts/" + id + "/grants", Token: admin,
			Body: PostingRequest{Amount: min(left, MaxAmount), Reason: "opening"}, Headers: map[string]string{idem.Header: "k-" + rand.Text()}})
		require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
	}
}
