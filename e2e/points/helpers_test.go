package points_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/points"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// lab is one app under test with the tokens the experiments use.
type lab struct {
	*e2etest.App
	admin string
}

func start(t *testing.T) *lab {
	t.Helper()
	a := e2etest.Start(t, e2etest.Options{})
	return &lab{App: a, admin: a.Token(t, "admin-0001", httpx.RoleAdmin)}
}

// user mints a user token.
func (l *lab) user(t *testing.T, sub string) string { return l.Token(t, sub, httpx.RoleUser) }

// newKey is a fresh idempotency key.
func newKey() string { return "k-" + rand.Text() }

// openAccount creates a user account over HTTP and grants it balance
// points (in grants of at most MaxAmount).
func (l *lab) openAccount(t *testing.T, id, owner string, balance int64) points.Account {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: "POST", Path: "/points/accounts", Token: l.admin,
		Body: points.CreateAccountRequest{ID: id, Owner: owner}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var a points.Account
	r.JSON(t, &a)
	for left := balance; left > 0; left -= points.MaxAmount {
		r := l.grant(t, l.admin, id, newKey(), min(left, points.MaxAmount), "opening")
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	return a
}

func (l *lab) posting(ctx context.Context, kind, tok, id, key string, amount int64, reason string) (e2etest.Response, error) {
	req := e2etest.Req{Method: "POST", Path: "/points/accounts/" + id + "/" + kind, Token: tok,
		Body: points.PostingRequest{Amount: amount, Reason: reason}}
	if key != "" {
		req.Headers = map[string]string{idem.Header: key}
	}
	return l.Send(ctx, req)
}

func (l *lab) debit(t *testing.T, tok, id, key string, amount int64) e2etest.Response {
	t.Helper()
	r, err := l.posting(context.Background(), "debits", tok, id, key, amount, "prize-17")
	require.NoError(t, err)
	return r
}

// debitAsync sends a debit on its own goroutine (Wait checks it on the
// test goroutine).
func (l *lab) debitAsync(tok, id, key string, amount int64) *e2etest.Async[e2etest.Response] {
	return e2etest.Go(func() (e2etest.Response, error) {
		return l.posting(context.Background(), "debits", tok, id, key, amount, "prize-17")
	})
}

func (l *lab) grant(t *testing.T, tok, id, key string, amount int64, reason string) e2etest.Response {
	t.Helper()
	r, err := l.posting(context.Background(), "grants", tok, id, key, amount, reason)
	require.NoError(t, err)
	return r
}

// account reads an account over HTTP as the admin.
func (l *lab) account(t *testing.T, id string) points.Account {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: "GET", Path: "/points/accounts/" + id, Token: l.admin})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var a points.Account
	r.JSON(t, &a)
	return a
}

// ledger is what "nothing written" compares: every table a posting
// touches, summarised.
type ledger struct {
	Txns, Entries, Events, Repairs int64
	UserBalances, UserVersions     int64
	ShardBalances                  int64
}

func (l *lab) ledger(t *testing.T) ledger {
	t.Helper()
	var s ledger
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

// txnsOf counts the ledger transactions a client's key made.
func (l *lab) txnsOf(t *testing.T, client, key string) int {
	t.Helper()
	var n int
	require.NoError(t, l.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM points_ledger_txn WHERE client_id = $1 AND idem_key = $2`, client, key).Scan(&n))
	return n
}
