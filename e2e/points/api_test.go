package points_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	pointslab "github.com/fencelab/fencelab/lab/points"
	"github.com/fencelab/fencelab/services/points"
)

// Bad input on the debit and grant routes: each gets its 4xx problem and
// nothing is written — no transaction, entry, event or balance change.
func TestBadPostingsAreRefusedAndWriteNothing(t *testing.T) {
	t.Parallel()
	l := start(t)
	l.OpenAccount(t, "acct-0042", "user-0042", 1000)
	l.OpenAccount(t, "acct-0043", "user-0043", 1000)
	tok := l.User(t, "user-0042")
	before := l.Ledger(t)

	type want struct {
		status int
		code   string
	}
	debit := func(body any) e2etest.Req {
		return e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: tok, Body: body,
			Headers: map[string]string{idem.Header: pointslab.NewKey()}}
	}
	cases := map[string]struct {
		req  e2etest.Req
		want want
	}{
		"fractional amount":    {debit(`{"amount":30.5,"reason":"prize-17"}`), want{400, "invalid_field"}},
		"amount as a string":   {debit(`{"amount":"30","reason":"prize-17"}`), want{400, "invalid_field"}},
		"exponent amount":      {debit(`{"amount":3e1,"reason":"prize-17"}`), want{400, "invalid_field"}},
		"amount beyond int64":  {debit(`{"amount":99999999999999999999,"reason":"prize-17"}`), want{400, "invalid_field"}},
		"zero amount":          {debit(`{"amount":0,"reason":"prize-17"}`), want{422, "invalid_amount"}},
		"missing amount":       {debit(`{"reason":"prize-17"}`), want{422, "invalid_amount"}},
		"negative amount":      {debit(`{"amount":-30,"reason":"prize-17"}`), want{422, "invalid_amount"}},
		"absurd amount":        {debit(`{"amount":1000001,"reason":"prize-17"}`), want{422, "invalid_amount"}},
		"huge amount":          {debit(`{"amount":9223372036854775807,"reason":"prize-17"}`), want{422, "invalid_amount"}},
		"missing reason":       {debit(`{"amount":30}`), want{422, "invalid_reason"}},
		"long reason":          {debit(points.PostingRequest{Amount: 30, Reason: strings.Repeat("r", points.MaxReasonLen+1)}), want{422, "invalid_reason"}},
		"control in reason":    {debit(points.PostingRequest{Amount: 30, Reason: "prize\n17"}), want{422, "invalid_reason"}},
		"unknown field":        {debit(`{"amount":30,"reason":"prize-17","account":"acct-0043"}`), want{400, "unknown_field"}},
		"not JSON":             {debit(`amount=30`), want{400, "malformed_json"}},
		"empty body":           {debit(``), want{400, "empty_body"}},
		"two objects":          {debit(`{"amount":30,"reason":"a"}{"amount":30,"reason":"b"}`), want{400, "malformed_json"}},
		"missing key":          {e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: tok, Body: points.PostingRequest{Amount: 30, Reason: "prize-17"}}, want{400, "idempotency_key_missing"}},
		"malformed key":        {e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: tok, Body: points.PostingRequest{Amount: 30, Reason: "prize-17"}, Headers: map[string]string{idem.Header: "two words"}}, want{400, "idempotency_key_invalid"}},
		"no token":             {e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Body: points.PostingRequest{Amount: 30, Reason: "prize-17"}, Headers: map[string]string{idem.Header: pointslab.NewKey()}}, want{401, "unauthorized"}},
		"forged token":         {e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: tok + "x", Body: points.PostingRequest{Amount: 30, Reason: "prize-17"}, Headers: map[string]string{idem.Header: pointslab.NewKey()}}, want{401, "unauthorized"}},
		"unknown account":      {postTo("acct-9999", "debits", tok), want{404, "account_not_found"}},
		"someone else's":       {postTo("acct-0043", "debits", tok), want{403, "forbidden"}},
		"a system account":     {postTo("sys:redemption", "debits", tok), want{403, "forbidden"}},
		"malformed account id": {postTo("acct..%2F", "debits", tok), want{400, "invalid_id"}},
		"too long account id":  {postTo(strings.Repeat("a", 65), "debits", tok), want{400, "invalid_id"}},
		"admin debits":         {postTo("acct-0042", "debits", l.Admin), want{403, "forbidden"}},
		"user grants":          {postTo("acct-0042", "grants", tok), want{403, "forbidden"}},
		"grant to unknown":     {postTo("acct-9999", "grants", l.Admin), want{404, "account_not_found"}},
		"grant to system":      {postTo("sys:issuance", "grants", l.Admin), want{422, "not_a_user_account"}},
		"grant absurd amount":  {e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/grants", Token: l.Admin, Body: `{"amount":5000000,"reason":"bonus"}`, Headers: map[string]string{idem.Header: pointslab.NewKey()}}, want{422, "invalid_amount"}},
		"grant without key":    {e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/grants", Token: l.Admin, Body: points.PostingRequest{Amount: 5, Reason: "bonus"}}, want{400, "idempotency_key_missing"}},
	}
	for name, c := range cases {
		c.req.Invalid = true // bad input on purpose: only the response is checked against the contract
		r := l.Do(t, c.req)
		require.Equal(t, c.want, want{r.Status, r.Code()}, "%s: %s", name, r.Body)
		require.Equal(t, httpx.ProblemContentType, r.Header.Get("Content-Type"), name)
	}
	require.Equal(t, before, l.Ledger(t), "nothing written")

	// A refusal decided against the ledger is recorded and replayed; one
	// decided on the body is not, so the client may fix the body and reuse
	// its key.
	key := pointslab.NewKey()
	r := l.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts/acct-0042/debits", Token: tok,
		Body: `{"amount":0,"reason":"prize-17"}`, Headers: map[string]string{idem.Header: key}, Invalid: true})
	require.Equal(t, "invalid_amount", r.Code())
	require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-0042", key, 30).Status)

	key = pointslab.NewKey()
	r = l.Debit(t, tok, "acct-0042", key, 5000)
	require.Equal(t, "insufficient_balance", r.Code())
	require.Contains(t, string(r.Body), "acct-0042 holds 970 points, the debit needs 5000")
	again := l.Debit(t, tok, "acct-0042", key, 5000)
	require.Equal(t, "true", again.Header.Get(idem.ReplayedHeader))
	require.Equal(t, string(r.Body), string(again.Body))
	e2etest.Assert(t, l.Pool, "points", "idem")
}

func postTo(id, kind, tok string) e2etest.Req {
	return e2etest.Req{Method: "POST", Path: "/points/accounts/" + id + "/" + kind, Token: tok,
		Body: points.PostingRequest{Amount: 30, Reason: "prize-17"}, Headers: map[string]string{idem.Header: pointslab.NewKey()}}
}

func TestAccountsAreCreatedByAdminsAndReadByTheirOwners(t *testing.T) {
	t.Parallel()
	l := start(t)
	tok := l.User(t, "user-0042")

	create := func(tok string, body any, headers map[string]string) e2etest.Response {
		return l.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts", Token: tok, Body: body, Headers: headers})
	}
	createBad := func(body any) e2etest.Response {
		return l.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts", Token: l.Admin, Body: body, Invalid: true})
	}
	a := l.OpenAccount(t, "acct-0042", "user-0042", 0)
	require.Equal(t, points.Account{ID: "acct-0042", Owner: "user-0042", Kind: "user", CreatedAt: a.CreatedAt}, a)

	r := create(l.Admin, points.CreateAccountRequest{ID: "acct-0042", Owner: "user-0043"}, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "account_exists", r.Code())
	for name, body := range map[string]points.CreateAccountRequest{
		"bad id":        {ID: "sys:mine", Owner: "user-0042"},
		"space in id":   {ID: "acct 1", Owner: "user-0042"},
		"long id":       {ID: strings.Repeat("a", 65), Owner: "user-0042"},
		"no owner":      {ID: "acct-0044"},
		"bad owner":     {ID: "acct-0044", Owner: "user 42"},
		"long owner":    {ID: "acct-0044", Owner: strings.Repeat("u", 129)},
		"dotted owner":  {ID: "acct-0044", Owner: ".user"},
		"control owner": {ID: "acct-0044", Owner: "user\x00"},
	} {
		r := createBad(body)
		require.Contains(t, []int{400, 422}, r.Status, "%s: %s", name, r.Body)
	}
	require.Equal(t, http.StatusForbidden, create(tok, points.CreateAccountRequest{Owner: "user-0042"}, nil).Status)

	// Without an id the server picks one; with a key a retry is a replay.
	key := pointslab.NewKey()
	r = create(l.Admin, points.CreateAccountRequest{Owner: "user-0043"}, map[string]string{idem.Header: key})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var gen points.Account
	r.JSON(t, &gen)
	require.Regexp(t, `^acct-[a-z2-7]{16}$`, gen.ID)
	again := create(l.Admin, points.CreateAccountRequest{Owner: "user-0043"}, map[string]string{idem.Header: key})
	require.Equal(t, "true", again.Header.Get(idem.ReplayedHeader))
	require.Equal(t, string(r.Body), string(again.Body))

	// Owner or admin reads; anyone else gets 403; unknown 404.
	get := func(tok, id string) e2etest.Response {
		return l.Do(t, e2etest.Req{Method: "GET", Path: "/points/accounts/" + id, Token: tok})
	}
	require.Equal(t, http.StatusOK, get(tok, "acct-0042").Status)
	require.Equal(t, http.StatusOK, get(l.Admin, "acct-0042").Status)
	require.Equal(t, "forbidden", get(tok, gen.ID).Code())
	require.Equal(t, "forbidden", get(tok, points.IssuanceAccount).Code())
	require.Equal(t, "account_not_found", get(tok, "acct-9999").Code())
	require.Equal(t, "invalid_id", l.Do(t, e2etest.Req{Method: "GET", Path: "/points/accounts/-x", Token: tok, Invalid: true}).Code())
	require.Equal(t, http.StatusUnauthorized, get("", "acct-0042").Status)
	require.Equal(t, "no-store", get(tok, "acct-0042").Header.Get("Cache-Control"))
	sys := l.Account(t, points.IssuanceAccount)
	require.Equal(t, points.KindSystem, sys.Kind)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// History is keyset-paginated, newest first, with an opaque cursor: pages
// neither skip nor repeat a line, even while new transactions arrive.
func TestEntriesArePagedNewestFirstWithAnOpaqueCursor(t *testing.T) {
	l, tok := startWithAccount(t, "acct-0042", "user-0042", 1000)
	for i := range 7 {
		require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-0042", pointslab.NewKey(), int64(i+1)).Status)
	}
	page := func(tok, query string) (points.EntryPage, e2etest.Response) {
		r := l.Do(t, e2etest.Req{Method: "GET", Path: "/points/accounts/acct-0042/entries" + query, Token: tok})
		var p points.EntryPage
		if r.Status == http.StatusOK {
			r.JSON(t, &p)
		}
		return p, r
	}

	var seen []int64
	var amounts []int64
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		p, r := page(tok, "?limit=3&cursor="+cursor)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		for _, e := range p.Entries {
			seen = append(seen, e.TxnID)
			amounts = append(amounts, e.Amount)
		}
		if pages == 0 {
			// A debit arriving between pages lands before the cursor: the
			// next pages still continue where this one stopped.
			require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-0042", pointslab.NewKey(), 100).Status)
		}
		if p.NextCursor == "" {
			break
		}
		require.NotContains(t, p.NextCursor, "=", "base64url without padding")
		cursor = p.NextCursor
	}
	require.Equal(t, []int64{-7, -6, -5, -4, -3, -2, -1, 1000}, amounts)
	for i := 1; i < len(seen); i++ {
		require.Greater(t, seen[i-1], seen[i], "strictly newest first")
	}

	p, _ := page(tok, "")
	require.Len(t, p.Entries, 9, "default page holds everything here")
	require.Equal(t, "debit", p.Entries[0].Kind)
	require.Equal(t, "prize-17", p.Entries[0].Reason)
	require.Equal(t, "grant", p.Entries[8].Kind)

	for q, code := range map[string]string{
		"?limit=0": "invalid_limit", "?limit=201": "invalid_limit", "?limit=abc": "invalid_limit",
		"?cursor=zzz": "invalid_cursor", "?cursor=" + strings.Repeat("A", 100): "invalid_cursor",
		"?cursor=djE6LTE": "invalid_cursor", // "v1:-1"
		"?cursor=MTIz":    "invalid_cursor", // "123", no version
	} {
		r := l.Do(t, e2etest.Req{Method: "GET", Path: "/points/accounts/acct-0042/entries" + q, Token: tok, Invalid: true})
		require.Equal(t, code, r.Code(), q)
	}
	_, r := page(l.User(t, "user-0043"), "")
	require.Equal(t, "forbidden", r.Code())
	_, r = page(l.Admin, "?limit=1")
	require.Equal(t, http.StatusOK, r.Status)
	e2etest.Assert(t, l.Pool, "points")
}

// A repair that runs while a debit holds the account's row lock waits for
// it and sums the entries after it: the drift it fixes is the corruption,
// not the in-flight debit. (Locking and summing in one statement would sum
// with the snapshot from before the wait and break a correct balance.)
func TestRepairWaitsForAnInFlightDebitAndFixesOnlyTheCorruption(t *testing.T) {
	l, tok := startWithAccount(t, "acct-0042", "user-0042", 1000)
	ctx := context.Background()
	_, err := l.Pool.Exec(ctx, `UPDATE points_account SET balance = balance + 5 WHERE id = 'acct-0042'`)
	require.NoError(t, err)

	key := pointslab.NewKey()
	gate := l.Faults.Pause(idem.PointBeforeFinish, key)
	t.Cleanup(gate.Release)
	debited := l.DebitAsync(tok, "acct-0042", key, 30)
	<-gate.Reached() // the debit's UPDATE ran: the row is locked, its entries are uncommitted

	repaired := l.Go(e2etest.Req{Method: "POST", Path: "/points/admin/recompute?account=acct-0042&repair=true", Token: l.Admin})
	e2etest.WaitForLockWaiters(t, l.Pool, "FOR UPDATE", 1) // the repair is waiting for the row lock
	gate.Release()

	require.Equal(t, http.StatusCreated, debited.Wait(t).Status)
	r := repaired.Wait(t)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rep points.RecomputeReport
	r.JSON(t, &rep)
	require.Equal(t, []points.Drift{{AccountID: "acct-0042", Kind: "user", Stored: 975, FromEntries: 970, Drift: 5,
		Repaired: true, RepairID: rep.Accounts[0].RepairID}}, rep.Accounts)
	require.EqualValues(t, 970, l.Account(t, "acct-0042").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// Debits and grants on the same accounts from many clients at once never
// deadlock: every writer locks the user account, then one system shard.
// With one shard every transaction meets every other on the system side.
func TestDebitsAndGrantsOnOneHotAccountDoNotDeadlock(t *testing.T) {
	t.Parallel()
	l := startWith(t, lab.Options{Settings: map[string]string{points.EnvSystemShards: "1"}})
	l.OpenAccount(t, "acct-0042", "user-0042", 600)
	l.OpenAccount(t, "acct-0043", "user-0043", 600)
	toks := []string{l.User(t, "user-0042"), l.User(t, "user-0043")}
	ids := []string{"acct-0042", "acct-0043"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				k := (c + i) % 2
				kind, tok := "debits", toks[k]
				if (c+i)%3 == 0 {
					kind, tok = "grants", l.Admin
				}
				r, err := l.Posting(context.Background(), kind, tok, ids[k], pointslab.NewKey(), 20, "hot")
				mu.Lock()
				if err != nil {
					statuses[-1]++
				} else {
					statuses[r.Status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, s, "%v (a deadlock would be a 503 retry)", statuses)
	}
	require.Positive(t, statuses[http.StatusCreated])
	e2etest.Assert(t, l.Pool, "points", "idem")
}

// The demo seed is idempotent: run twice, two accounts with one welcome
// grant each.
func TestSeedIsIdempotent(t *testing.T) {
	t.Parallel()
	l := start(t)
	for range 2 {
		require.NoError(t, l.Seed(context.Background(), "points"))
	}
	for _, id := range []string{"acct-0042", "acct-0043"} {
		a := l.Account(t, id)
		require.EqualValues(t, 1000, a.Balance)
		require.Equal(t, "user-"+strings.TrimPrefix(id, "acct-"), a.Owner)
	}
	require.Equal(t, 1, l.TxnsOf(t, points.SeedClient, "welcome-acct-0042"))
	require.EqualValues(t, 2, l.Ledger(t).Txns)
	e2etest.Assert(t, l.Pool, "points")
}

// PTS-I5: the ledger refuses rewrites, and the checks notice a disabled
// guard (PTS-S1, the schema) and the entry it let through (PTS-I5, the data).
func TestLedgerIsAppendOnly(t *testing.T) {
	t.Parallel()
	l := start(t)
	l.OpenAccount(t, "acct-0042", "user-0042", 100)
	ctx := context.Background()
	for _, sql := range []string{
		`UPDATE points_ledger_entry SET amount = amount * 2`,
		`DELETE FROM points_ledger_entry`,
		`TRUNCATE points_ledger_entry CASCADE`,
		`UPDATE points_ledger_txn SET reason = 'x'`,
		`DELETE FROM points_ledger_txn WHERE false`, // refused even when it matches nothing
		`DELETE FROM points_repair`,
	} {
		_, err := l.Pool.Exec(ctx, sql)
		require.ErrorContains(t, err, "append-only", sql)
	}
	e2etest.Assert(t, l.Pool, "points")

	_, err := l.Pool.Exec(ctx, `ALTER TABLE points_ledger_entry DISABLE TRIGGER points_append_only`)
	require.NoError(t, err)
	_, err = l.Pool.Exec(ctx, `UPDATE points_ledger_entry SET amount = amount WHERE account_id = 'acct-0042'`)
	require.NoError(t, err)
	res := e2etest.Invariants().Run(ctx, l.Pool, "PTS-I5", "PTS-S1")
	require.Len(t, res, 2)
	for _, r := range res {
		require.NoError(t, r.Err)
		want := [][]any{{"entry rewritten after its transaction", rowKey(t, l)}}
		if r.ID == "PTS-S1" {
			want = [][]any{{"append-only trigger missing or not always enabled", "points_ledger_entry points_append_only"}}
		}
		require.ElementsMatch(t, want, r.Rows, r.ID)
	}
}

func rowKey(t *testing.T, l *pointslab.Lab) string {
	var k string
	require.NoError(t, l.Pool.QueryRow(context.Background(),
		`SELECT txn_id || ' ' || account_id FROM points_ledger_entry WHERE account_id = 'acct-0042'`).Scan(&k))
	return k
}

// PTS-I2's first line outlives the idempotency record: once the record is
// purged (its 24 h retention), the same key comes back as a new request,
// and the ledger's UNIQUE (client_id, idem_key) still refuses a second
// transaction.
func TestKeyReusedAfterItsRecordIsPurgedMakesNoSecondTransaction(t *testing.T) {
	l, tok := startWithAccount(t, "acct-0042", "user-0042", 1000)
	key := pointslab.NewKey()
	require.Equal(t, http.StatusCreated, l.Debit(t, tok, "acct-0042", key, 30).Status)

	n, err := idem.NewKeys(l.Pool, idem.Options{}).Purge(context.Background(), -time.Hour) // everything is older than an hour from now
	require.NoError(t, err)
	require.Positive(t, n)
	before := l.Ledger(t)
	r := l.Debit(t, tok, "acct-0042", key, 30)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "duplicate_transaction", r.Code())
	require.Equal(t, before, l.Ledger(t), "nothing written")
	require.Equal(t, 1, l.TxnsOf(t, "user-0042", key))
	require.EqualValues(t, 970, l.Account(t, "acct-0042").Balance)
	e2etest.Assert(t, l.Pool, "points", "idem")
}
