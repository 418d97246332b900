package points_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/points"
)

// PTS-01: 100 concurrent debits of 30 against a balance of 1,000 over real
// HTTP. Exactly 33 fit; the other 67 are refused with insufficient_balance
// and the balance ends at 10, never below 0 on the way (PTS-I1).
func TestPTS01ConcurrentDebitsNeverOverdraw(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, points.ConcurrentDebits)
}

// PTS-02: the server commits a debit, then the response is lost: the
// handler is held after the commit until the client has given up. The
// client's retry with the same key makes no second transaction; it gets
// the recorded response, byte for byte, marked Idempotent-Replayed.
func TestPTS02LostResponseRetryIsReplayedNotDebitedTwice(t *testing.T) {
	t.Parallel()
	l := start(t)
	l.openAccount(t, "acct-0042", "user-0042", 1000)
	tok := l.user(t, "user-0042")
	key := newKey()

	gate := l.Faults.Pause(idem.PointAfterCommit, key)
	t.Cleanup(gate.Release)
	ctx, giveUp := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := l.posting(ctx, "debits", tok, "acct-0042", key, 30, "prize-17")
		first <- err
	}()
	select {
	case <-gate.Reached(): // committed; the response is not written yet
	case <-time.After(30 * time.Second):
		t.Fatal("the debit never reached the after-commit point")
	}
	require.Equal(t, 1, l.txnsOf(t, "user-0042", key), "the debit committed before the response was lost")
	giveUp() // the client's timeout: it never sees the answer
	require.ErrorIs(t, <-first, context.Canceled)

	r := l.debit(t, tok, "acct-0042", key, 30)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get(idem.ReplayedHeader))
	require.Equal(t, string(l.recordedBody(t, "points.debit", "user-0042", key)), string(r.Body),
		"the replay is the response the lost request recorded")
	var txn points.Txn
	r.JSON(t, &txn)
	var id int64
	require.NoError(t, l.Pool.QueryRow(context.Background(),
		`SELECT id FROM points_ledger_txn WHERE client_id = 'user-0042' AND idem_key = $1`, key).Scan(&id))
	require.Equal(t, id, txn.ID, "the replay names the one transaction")
	require.EqualValues(t, 970, txn.Balance)

	// And again: still one transaction, still the same bytes.
	again := l.debit(t, tok, "acct-0042", key, 30)
	require.Equal(t, r.Body, again.Body)
	require.Equal(t, 1, l.txnsOf(t, "user-0042", key))
	require.EqualValues(t, 970, l.account(t, "acct-0042").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// PTS-03: the same key with a different amount is another request: 422
// idempotency_key_reused, and nothing is written.
func TestPTS03SameKeyOtherAmountIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	l := start(t)
	l.openAccount(t, "acct-0042", "user-0042", 1000)
	tok := l.user(t, "user-0042")
	key := newKey()

	r := l.debit(t, tok, "acct-0042", key, 30)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

	before := l.ledger(t)
	r = l.debit(t, tok, "acct-0042", key, 40)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "idempotency_key_reused", r.Code())
	require.Equal(t, before, l.ledger(t), "nothing written")

	// The same key on another account is another request too.
	l.openAccount(t, "acct-0043", "user-0042", 1000)
	before = l.ledger(t)
	r = l.debit(t, tok, "acct-0043", key, 30)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "idempotency_key_reused", r.Code())
	require.Equal(t, before, l.ledger(t), "nothing written")

	require.Equal(t, 1, l.txnsOf(t, "user-0042", key))
	require.EqualValues(t, 970, l.account(t, "acct-0042").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// PTS-04: the same key sent twice at once. Timeline first: the first
// request holds its key (claimed, effect not begun) while the second
// arrives and is told 409 in flight; then a free-for-all of 20 copies.
// Either way: one 201 that did the work, the rest 409 or the replay, and
// one transaction.
func TestPTS04SameKeyConcurrentlyMakesOneTransaction(t *testing.T) {
	t.Parallel()
	l := start(t)
	l.openAccount(t, "acct-0042", "user-0042", 1000)
	tok := l.user(t, "user-0042")

	t.Run("timeline", func(t *testing.T) {
		key := newKey()
		gate := l.Faults.Pause(idem.PointBeforeEffect, key)
		t.Cleanup(gate.Release)
		first := make(chan e2etest.Response, 1)
		go func() { first <- l.debit(t, tok, "acct-0042", key, 30) }()
		<-gate.Reached()
		second := l.debit(t, tok, "acct-0042", key, 30)
		require.Equal(t, http.StatusConflict, second.Status, string(second.Body))
		require.Equal(t, "idempotency_key_in_flight", second.Code())
		require.NotEmpty(t, second.Header.Get("Retry-After"))
		gate.Release()
		r := <-first
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Empty(t, r.Header.Get(idem.ReplayedHeader))
		require.Equal(t, 1, l.txnsOf(t, "user-0042", key))
	})

	t.Run("race", func(t *testing.T) {
		key := newKey()
		const n = 20
		results := make([]e2etest.Response, n)
		var wg sync.WaitGroup
		fire := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); <-fire; results[i] = l.debit(t, tok, "acct-0042", key, 30) }()
		}
		close(fire)
		wg.Wait()
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
				t.Fatalf("unexpected answer %d %s", r.Status, r.Body)
			}
		}
		require.Equal(t, 1, firsts, "exactly one request did the work")
		require.Equal(t, n, firsts+replays+inFlight)
		for _, r := range results {
			if r.Status == http.StatusCreated {
				require.Equal(t, string(body), string(r.Body), "replays are the first response")
			}
		}
		require.Equal(t, 1, l.txnsOf(t, "user-0042", key))
	})

	require.EqualValues(t, 1000-2*30, l.account(t, "acct-0042").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// PTS-05: code corrupts a balance column. PTS-I4 reports exactly that
// account with its drift — in the test's registry and from the built
// `fencelab check`, which exits 1 — and recompute finds it, repairs it
// under the account's lock and records the repair; then PTS-I4 holds.
func TestPTS05CorruptedBalanceIsReportedAndRepairedFromTheLedger(t *testing.T) {
	t.Parallel()
	l := start(t)
	l.openAccount(t, "acct-0042", "user-0042", 1000)
	l.openAccount(t, "acct-0043", "user-0043", 500)
	tok := l.user(t, "user-0042")
	require.Equal(t, http.StatusCreated, l.debit(t, tok, "acct-0042", newKey(), 30).Status)
	e2etest.Assert(t, l.Pool, "points")

	// The bug: some code adds 29 points behind the ledger's back, and
	// another one loses 7 on the system side.
	ctx := context.Background()
	_, err := l.Pool.Exec(ctx, `UPDATE points_account SET balance = balance + 29 WHERE id = 'acct-0042'`)
	require.NoError(t, err)
	_, err = l.Pool.Exec(ctx, `UPDATE points_system_shard SET balance = balance - 7 WHERE account_id = 'sys:redemption' AND shard = 5`)
	require.NoError(t, err)

	res := e2etest.Invariants().Run(ctx, l.Pool, "PTS-I4")
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Equal(t, []string{"account", "kind", "stored", "from_entries", "drift"}, res[0].Columns)
	require.Equal(t, [][]any{
		{"acct-0042", "user", int64(999), int64(970), int64(29)},
		{"sys:redemption", "system", int64(23), int64(30), int64(-7)},
	}, res[0].Rows)

	// The built binary, as an operator runs it.
	cmd := exec.Command(e2etest.Binary(t), "check", "points")
	cmd.Env = e2etest.ChildEnv(l.DBURL)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 1, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "FAIL  PTS-I4")
	require.Contains(t, string(out), "acct-0042 | user | 999 | 970 | 29")
	require.Contains(t, string(out), "sys:redemption | system | 23 | 30 | -7")
	require.Contains(t, string(out), "1 violated")

	// Recompute without repair reports and changes nothing.
	r := l.Do(t, e2etest.Req{Method: "POST", Path: "/points/admin/recompute", Token: l.admin})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rep points.RecomputeReport
	r.JSON(t, &rep)
	require.Equal(t, points.RecomputeReport{Checked: 4, Drifted: 2, Accounts: []points.Drift{
		{AccountID: "acct-0042", Kind: "user", Stored: 999, FromEntries: 970, Drift: 29},
		{AccountID: "sys:redemption", Kind: "system", Stored: 23, FromEntries: 30, Drift: -7},
	}}, rep)
	require.EqualValues(t, 999, l.account(t, "acct-0042").Balance)

	// One account at a time, with repair.
	r = l.Do(t, e2etest.Req{Method: "POST", Path: "/points/admin/recompute?account=acct-0042&repair=true", Token: l.admin})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	rep = points.RecomputeReport{}
	r.JSON(t, &rep)
	require.Equal(t, 1, rep.Checked)
	require.Equal(t, 1, rep.Repaired)
	require.Len(t, rep.Accounts, 1)
	require.True(t, rep.Accounts[0].Repaired)
	require.EqualValues(t, 29, rep.Accounts[0].Drift)
	require.EqualValues(t, 970, l.account(t, "acct-0042").Balance)

	// Then everything else.
	r = l.Do(t, e2etest.Req{Method: "POST", Path: "/points/admin/recompute?repair=true", Token: l.admin})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	rep = points.RecomputeReport{}
	r.JSON(t, &rep)
	require.Equal(t, 1, rep.Repaired)
	require.Equal(t, "sys:redemption", rep.Accounts[0].AccountID)
	require.EqualValues(t, 30, l.account(t, points.RedemptionAccount).Balance)

	// Each repair is on record, append-only.
	rows, err := l.Pool.Query(ctx, `SELECT account_id, stored, recomputed, actor FROM points_repair ORDER BY id`)
	require.NoError(t, err)
	var repairs []string
	for rows.Next() {
		var id, actor string
		var stored, recomputed int64
		require.NoError(t, rows.Scan(&id, &stored, &recomputed, &actor))
		repairs = append(repairs, strings.Join([]string{id, actor}, " by ")+" "+jsonOf(stored, recomputed))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"acct-0042 by admin-0001 [999,970]", "sys:redemption by admin-0001 [23,30]"}, repairs)

	// Nothing left to repair; the binary agrees.
	r = l.Do(t, e2etest.Req{Method: "POST", Path: "/points/admin/recompute?repair=true", Token: l.admin})
	rep = points.RecomputeReport{}
	r.JSON(t, &rep)
	require.Equal(t, points.RecomputeReport{Checked: 4, Accounts: []points.Drift{}}, rep)
	cmd = exec.Command(e2etest.Binary(t), "check", "points")
	cmd.Env = e2etest.ChildEnv(l.DBURL)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	e2etest.Assert(t, l.Pool, "points")
}

func jsonOf(v ...any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// PTS-06: grants and debits interleaved from 16 clients over 50 accounts
// (seeded; the seed is printed so a failure can be replayed), some
// requests retried with their key. Every invariant holds, every balance is
// what the 201s add up to, and the system accounts balance the users.
func TestPTS06InterleavedGrantsAndDebitsKeepTheBooksBalanced(t *testing.T) {
	t.Parallel()
	l := start(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)

	const accounts, clients, opsPerClient, opening = 50, 16, 120, 300
	tokens := make([]string, accounts)
	for i := range accounts {
		l.openAccount(t, accountID(i), ownerOf(i), opening)
		tokens[i] = l.user(t, ownerOf(i))
	}
	svc := l.Token(t, "svc-0001", "service")

	// delta[i] is what the answered 201s say account i gained or lost.
	var mu sync.Mutex
	delta := make([]int64, accounts)
	var granted, debited, refused, replayed int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(c)))
			for range opsPerClient {
				i := rng.IntN(accounts)
				amount := int64(1 + rng.IntN(60))
				kind, tok, sign := "debits", tokens[i], int64(-1)
				if rng.IntN(3) == 0 {
					kind, tok, sign = "grants", svc, 1
				}
				key := newKey()
				r, err := l.posting(context.Background(), kind, tok, accountID(i), key, amount, "pts-06")
				if err != nil {
					t.Errorf("%s %s: %v", kind, accountID(i), err)
					return
				}
				if rng.IntN(5) == 0 { // a client that retries anyway
					again, err := l.posting(context.Background(), kind, tok, accountID(i), key, amount, "pts-06")
					if err != nil || again.Header.Get(idem.ReplayedHeader) != "true" || string(again.Body) != string(r.Body) {
						t.Errorf("retry of %s was not the replay: %d %s", key, again.Status, again.Body)
						return
					}
					mu.Lock()
					replayed++
					mu.Unlock()
				}
				mu.Lock()
				switch {
				case r.Status == http.StatusCreated && sign > 0:
					delta[i] += amount
					granted += amount
				case r.Status == http.StatusCreated:
					delta[i] -= amount
					debited += amount
				case r.Status == http.StatusConflict && r.Code() == "insufficient_balance":
					refused++
				default:
					t.Errorf("%s %s: %d %s", kind, accountID(i), r.Status, r.Body)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
	t.Logf("granted %d, debited %d, %d debits refused, %d retries replayed", granted, debited, refused, replayed)

	var users int64
	for i := range accounts {
		a := l.account(t, accountID(i))
		require.Equal(t, opening+delta[i], a.Balance, accountID(i))
		require.GreaterOrEqual(t, a.Balance, int64(0))
		users += a.Balance
	}
	issuance, redemption := l.account(t, points.IssuanceAccount), l.account(t, points.RedemptionAccount)
	require.Equal(t, -(accounts*opening + granted), issuance.Balance)
	require.Equal(t, debited, redemption.Balance)
	require.Zero(t, users+issuance.Balance+redemption.Balance, "the system accounts balance the user accounts")
	l.requireOneEventPerTxn(t)
	e2etest.Assert(t, l.Pool, "points", "idem")
}
