package points

// The kit the points chapter's experiments (and its e2e tests) drive the
// app with.

import (
	"context"
	"crypto/rand"
	"net/http"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/points"
)

// Lab is one running app with the admin token the chapter's experiments
// (and its e2e tests) use.
type Lab struct {
	*lab.App
	Admin string // admin-0001's token
}

// StartLab starts the app (on a fresh database, or o.DBURL).
func StartLab(x *lab.X, o lab.Options) *Lab {
	x.Helper()
	a := x.Start(o)
	return &Lab{App: a, Admin: a.Token(x, "admin-0001", httpx.RoleAdmin)}
}

// User mints a user token for sub.
func (l *Lab) User(t lab.T, sub string) string { return l.Token(t, sub, httpx.RoleUser) }

// NewKey is a fresh idempotency key.
func NewKey() string { return "k-" + rand.Text() }

// OpenAccount creates a user account over HTTP and grants it balance
// points (in grants of at most MaxAmount).
func (l *Lab) OpenAccount(t lab.T, id, owner string, balance int64) points.Account {
	t.Helper()
	r := l.Do(t, lab.Req{Method: "POST", Path: "/points/accounts", Token: l.Admin,
		Body: points.CreateAccountRequest{ID: id, Owner: owner}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var a points.Account
	r.JSON(t, &a)
	for left := balance; left > 0; left -= points.MaxAmount {
		r := l.Grant(t, l.Admin, id, NewKey(), min(left, points.MaxAmount), "opening")
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	return a
}

// Posting sends a debit or grant (kind "debits" or "grants"); key "" sends
// none.
func (l *Lab) Posting(ctx context.Context, kind, tok, id, key string, amount int64, reason string) (lab.Response, error) {
	req := lab.Req{Method: "POST", Path: "/points/accounts/" + id + "/" + kind, Token: tok,
		Body: points.PostingRequest{Amount: amount, Reason: reason}}
	if key != "" {
		req.Headers = map[string]string{idem.Header: key}
	}
	return l.Send(ctx, req)
}

// Debit debits amount from account id with key, as tok.
func (l *Lab) Debit(t lab.T, tok, id, key string, amount int64) lab.Response {
	t.Helper()
	r, err := l.Posting(context.Background(), "debits", tok, id, key, amount, "prize-17")
	require.NoError(t, err)
	return r
}

// DebitAsync is Debit on its own goroutine (Wait checks it on the test
// goroutine).
func (l *Lab) DebitAsync(tok, id, key string, amount int64) *lab.Async[lab.Response] {
	return lab.Go(func() (lab.Response, error) {
		return l.Posting(context.Background(), "debits", tok, id, key, amount, "prize-17")
	})
}

// Grant grants amount to account id with key, as tok.
func (l *Lab) Grant(t lab.T, tok, id, key string, amount int64, reason string) lab.Response {
	t.Helper()
	r, err := l.Posting(context.Background(), "grants", tok, id, key, amount, reason)
	require.NoError(t, err)
	return r
}

// Account reads an account over HTTP as the admin.
func (l *Lab) Account(t lab.T, id string) points.Account {
	t.Helper()
	r := l.Do(t, lab.Req{Method: "GET", Path: "/points/accounts/" + id, Token: l.Admin})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var a points.Account
	r.JSON(t, &a)
	return a
}

// TxnsOf counts the ledger transactions a client's key made.
func (l *Lab) TxnsOf(t lab.T, client, key string) int {
	t.Helper()
	var n int
	require.NoError(t, l.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM points_ledger_txn WHERE client_id = $1 AND idem_key = $2`, client, key).Scan(&n))
	return n
}

// LedgerSummary is what "nothing written" compares: every table a posting
// touches, summarised.
type LedgerSummary struct {
	Txns, Entries, Events, Repairs int64
	UserBalances, UserVersions     int64
	ShardBalances                  int64
}

// Ledger summarises the ledger now.
func (l *Lab) Ledger(t lab.T) LedgerSummary {
	t.Helper()
	var s LedgerSummary
	require.NoError(t, l.Pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM points_ledger_txn),
       (SELECT count(*) FROM points_ledger_entry),
       (SELECT count(*) FROM outbox_event WHERE topic LIKE 'points.%'),
       (SELECT count(*) FROM points_repair),
       (SELECT coalesce(sum(balance), 0)::bigint FROM points_account WHERE kind = 'user'),
       (SELECT coalesce(sum(version), 0)::bigint FROM points_account WHERE kind = 'user'),
       (SELECT coalesce(sum(abs(balance)), 0)::bigint FROM points_system_shard)`).
		Scan(&s.Txns, &s.Entries, &s.Events, &s.Repairs, &s.UserBalances, &s.UserVersions, &s.ShardBalances))
	return s
}
