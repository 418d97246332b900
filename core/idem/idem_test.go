package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/core/promx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// invariants are this package's own: the test needs no module list.
var invariants = invariant.MustRegistry(invariant.Core, idem.Invariants)

var errInsufficient = errors.New("demo: insufficient balance")

var testErrors = httpx.NewErrors([]httpx.ErrorMapping{httpx.Map(errInsufficient, http.StatusConflict, "insufficient_balance")})

// demoSchema is the tests' own effect: a debit that moves a balance and
// writes one effect row. demo_effect has no unique key on purpose — if a
// key's effect ever ran twice, two rows would say so.
const demoSchema = `
CREATE TABLE demo_account (owner text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
CREATE TABLE demo_effect (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner  text   NOT NULL,
    key    text   NOT NULL,
    amount bigint NOT NULL
);
INSERT INTO demo_account VALUES ('user-0042', 1000), ('user-0043', 1000);`

type bundle struct {
	pool    *pgxpool.Pool
	url     string
	faults  *faults.Set
	keys    *idem.Keys
	metrics *prometheus.Registry // the store's own: nothing else counts into it
	tokens  map[string]string
}

// setup mounts POST /demo/accounts/:owner/debits behind real auth and
// idem.Require on a real HTTP server over the test's own database.
func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.New(t)
	_, err := pool.Exec(context.Background(), demoSchema)
	require.NoError(t, err)
	return mount(t, pool, nil)
}

// mount is one process of the demo over pool: its own fault points,
// metrics, key store (naming presence as the owner of its claims; nil:
// none) and HTTP server. Two mounts over one database are two processes.
func mount(t *testing.T, pool *pgxpool.Pool, presence *idem.Presence) *bundle {
	t.Helper()
	auth, err := httpx.NewAuth([]byte("idem-test-secret-0123456789"))
	require.NoError(t, err)
	fs := faults.New()
	reg := prometheus.NewRegistry()
	keys := idem.NewKeys(pool, idem.Options{Faults: fs, Metrics: reg, Presence: presence})

	type debit struct {
		Amount int64  `json:"amount"`
		Reason string `json:"reason"`
	}
	e := httpx.New(httpx.Options{Errors: testErrors})
	debitHandler := func(c echo.Context) error {
		owner := c.Param("owner")
		if err := httpx.RequireOwner(c, owner); err != nil {
			return err
		}
		var req debit
		if err := httpx.Bind(c, &req); err != nil {
			return err
		}
		if req.Amount <= 0 {
			return httpx.Invalid("invalid_amount", "amount must be positive")
		}
		key := c.Request().Header.Get(idem.Header)
		return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
			var balance int64
			err := tx.QueryRow(ctx, `UPDATE demo_account SET balance = balance - $2
			                          WHERE owner = $1 AND balance >= $2 RETURNING balance`, owner, req.Amount).Scan(&balance)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, nil, errInsufficient
			}
			if err != nil {
				return 0, nil, err
			}
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO demo_effect (owner, key, amount) VALUES ($1, $2, $3) RETURNING id`,
				owner, key, req.Amount).Scan(&id); err != nil {
				return 0, nil, err
			}
			return http.StatusCreated, map[string]any{"effect_id": id, "balance": balance, "amount": req.Amount, "reason": req.Reason}, nil
		})
	}
	e.POST("/demo/accounts/:owner/debits", debitHandler, auth.Require(httpx.RoleUser), keys.Require("demo.debit"))
	e.POST("/demo/accounts/:owner/optional-debits", debitHandler, auth.Require(httpx.RoleUser), keys.Optional("demo.optional"))

	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	b := &bundle{pool: pool, url: srv.URL, faults: fs, keys: keys, metrics: reg, tokens: map[string]string{}}
	for _, sub := range []string{"user-0042", "user-0043"} {
		tok, err := auth.Mint(sub, httpx.RoleUser, time.Hour)
		require.NoError(t, err)
		b.tokens[sub] = tok
	}
	return b
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.body, &p)
	return p.Code
}

func (r reply) replayed() bool { return r.header.Get(idem.ReplayedHeader) == "true" }

// post debits user's own account; key "" sends no header.
func (b *bundle) post(t *testing.T, user, key, body string) reply {
	t.Helper()
	r, err := b.send(context.Background(), user, "/demo/accounts/"+user+"/debits", key, body)
	require.NoError(t, err)
	return r
}

func (b *bundle) send(ctx context.Context, user, path, key, body string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.tokens[user])
	if key != "" {
		req.Header.Set(idem.Header, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}, err
}

// effects re-reads the ground truth for one key.
func (b *bundle) effects(t *testing.T, user, key string) (n int, balance int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM demo_effect WHERE owner = $1 AND key = $2`, user, key).Scan(&n))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT balance FROM demo_account WHERE owner = $1`, user).Scan(&balance))
	return n, balance
}

// assertConsistent runs IDEM-I1 and the effect half this demo owns: every
// finished 201 record has exactly one effect row, and no key has more.
func (b *bundle) assertConsistent(t *testing.T) {
	t.Helper()
	invariants.Assert(t, b.pool, "idem")
	rows, err := b.pool.Query(context.Background(), `
		SELECT r.subject, r.key, r.status, count(e.id)
		  FROM idem_request r
		  LEFT JOIN demo_effect e ON e.owner = r.subject AND e.key = r.key
		 WHERE r.scope = 'demo.debit'
		 GROUP BY r.subject, r.key, r.status, r.state
		HAVING (r.state = 'done' AND r.status = 201 AND count(e.id) <> 1)
		    OR (r.state = 'done' AND r.status <> 201 AND count(e.id) <> 0)
		    OR count(e.id) > 1`)
	require.NoError(t, err)
	bad, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	require.NoError(t, err)
	require.Empty(t, bad, "records whose effect does not exist exactly once")
}

const body30 = `{"amount":30,"reason":"prize-17"}`

func TestIdempotencyReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post(t, "user-0042", "k-replay-1", body30)
	require.Equal(t, http.StatusCreated, first.status, string(first.body))
	require.False(t, first.replayed())

	// The same request again — and once more with the same JSON written
	// differently: member order and whitespace do not change the request.
	for _, body := range []string{body30, "{ \"reason\": \"prize-17\",\n  \"amount\": 30 }"} {
		again := b.post(t, "user-0042", "k-replay-1", body)
		require.Equal(t, http.StatusCreated, again.status)
		require.True(t, again.replayed(), "replays carry Idempotent-Replayed: true")
		require.Equal(t, first.body, again.body, "a replay is the stored bytes, not a re-rendering")
		require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
	}

	// The draft's Structured Field form ("…") names the same key.
	quoted := b.post(t, "user-0042", `"k-replay-1"`, body30)
	require.True(t, quoted.replayed())
	require.Equal(t, first.body, quoted.body)

	n, balance := b.effects(t, "user-0042", "k-replay-1")
	require.Equal(t, 1, n)
	require.EqualValues(t, 970, balance)
	b.assertConsistent(t)
}

// A business rejection is an answer like any other: recorded in its own
// fenced write and replayed byte for byte, even after the balance would
// allow the debit — the key stands for that one request.
func TestIdempotencyBusinessRejectionIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(context.Background(), `UPDATE demo_account SET balance = 10 WHERE owner = 'user-0042'`)
	require.NoError(t, err)

	first := b.post(t, "user-0042", "k-reject-1", body30)
	require.Equal(t, http.StatusConflict, first.status)
	require.Equal(t, "insufficient_balance", first.code())
	require.Equal(t, httpx.ProblemContentType, first.header.Get("Content-Type"))

	_, err = b.pool.Exec(context.Background(), `UPDATE demo_account SET balance = 1000 WHERE owner = 'user-0042'`)
	require.NoError(t, err)
	again := b.post(t, "user-0042", "k-reject-1", body30)
	require.Equal(t, http.StatusConflict, again.status)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)

	n, balance := b.effects(t, "user-0042", "k-reject-1")
	require.Zero(t, n)
	require.EqualValues(t, 1000, balance)
	b.assertConsistent(t)
}

func TestIdempotencyKeyReusedWithOtherPayloadIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post(t, "user-0042", "k-reuse-1", body30)
	require.Equal(t, http.StatusCreated, first.status)

	other := b.post(t, "user-0042", "k-reuse-1", `{"amount":31,"reason":"prize-17"}`)
	require.Equal(t, http.StatusUnprocessableEntity, other.status)
	require.Equal(t, "idempotency_key_reused", other.code())

	// Another path (here: a query string) is another request too.
	r, err := b.send(context.Background(), "user-0042", "/demo/accounts/user-0042/debits?note=x", "k-reuse-1", body30)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)

	// And the original still replays.
	again := b.post(t, "user-0042", "k-reuse-1", body30)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)

	n, balance := b.effects(t, "user-0042", "k-reuse-1")
	require.Equal(t, 1, n)
	require.EqualValues(t, 970, balance)
	b.assertConsistent(t)
}

func TestIdempotencyMissingKeyIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post(t, "user-0042", "", body30)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "idempotency_key_missing", r.code())

	for name, key := range map[string]string{
		"too long":      strings.Repeat("k", idem.MaxKeyLen+1),
		"space":         "two words",
		"quote inside":  `k"1`,
		"empty quoted":  `""`,
		"control chars": "k\x01",
	} {
		r, err := b.send(context.Background(), "user-0042", "/demo/accounts/user-0042/debits", key, body30)
		if err != nil { // net/http refuses to send some of these at all
			continue
		}
		require.Equal(t, http.StatusBadRequest, r.status, name)
		require.Equal(t, "idempotency_key_invalid", r.code(), name)
	}
	ok := b.post(t, "user-0042", strings.Repeat("k", idem.MaxKeyLen), body30)
	require.Equal(t, http.StatusCreated, ok.status, "the longest valid key is accepted")

	var records, effects int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_request`).Scan(&records))
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM demo_effect`).Scan(&effects))
	require.Equal(t, 1, records)
	require.Equal(t, 1, effects)
	b.assertConsistent(t)
}

func TestIdempotencyKeysAreScopedPerSubject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.post(t, "user-0042", "k-shared", body30)
	c := b.post(t, "user-0043", "k-shared", body30)
	require.Equal(t, http.StatusCreated, a.status)
	require.Equal(t, http.StatusCreated, c.status)
	require.False(t, c.replayed(), "another subject's key is another key")
	require.NotEqual(t, a.body, c.body)
	n42, _ := b.effects(t, "user-0042", "k-shared")
	n43, _ := b.effects(t, "user-0043", "k-shared")
	require.Equal(t, 1, n42)
	require.Equal(t, 1, n43)
	b.assertConsistent(t)
}

// Validation failures happen before the key is recorded, and unexpected
// errors release it: either way the client may fix things and reuse it.
func TestIdempotencyFailuresDoNotBurnTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := b.post(t, "user-0042", "k-burn-1", `{"amount":"thirty"}`)
	require.Equal(t, http.StatusBadRequest, bad.status)

	b.faults.Fail(idem.PointBeforeFinish, "k-burn-1")
	boom := b.post(t, "user-0042", "k-burn-1", body30)
	require.Equal(t, http.StatusInternalServerError, boom.status)
	var records int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_request`).Scan(&records))
	require.Zero(t, records, "an unexpected error releases the key")
	b.faults.Disarm(idem.PointBeforeFinish)

	ok := b.post(t, "user-0042", "k-burn-1", body30)
	require.Equal(t, http.StatusCreated, ok.status)
	require.False(t, ok.replayed())
	n, balance := b.effects(t, "user-0042", "k-burn-1")
	require.Equal(t, 1, n)
	require.EqualValues(t, 970, balance)
	b.assertConsistent(t)
}

func TestIdempotencyPurgeForgetsExpiredKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, k := range []string{"k-old", "k-new"} {
		require.Equal(t, http.StatusCreated, b.post(t, "user-0042", k, body30).status)
	}
	// An in-flight record older than the retention whose lock still holds
	// is kept: its request may still finish.
	_, err := b.pool.Exec(ctx, `
		INSERT INTO idem_request (scope, subject, key, fingerprint, state, locked_until, created_at)
		VALUES ('demo.debit', 'user-0042', 'k-running', sha256('x'), 'in_flight', now() + interval '1 minute', now() - interval '25 hours')`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE idem_request SET created_at = now() - interval '25 hours' WHERE key = 'k-old'`)
	require.NoError(t, err)

	n, err := b.keys.Purge(ctx, idem.DefaultRetention)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	// The store counts into the registry it was given: the test's own.
	requireCounter(t, b.metrics, 1, "fencelab_idem_purged_total")
	requireCounter(t, b.metrics, 2, "fencelab_idem_requests_total", "scope", "demo.debit", "outcome", "first")
	var keys []string
	rows, _ := b.pool.Query(ctx, `SELECT key FROM idem_request ORDER BY key`)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"k-new", "k-running"}, keys)

	// After retention the key is new again.
	again := b.post(t, "user-0042", "k-old", body30)
	require.Equal(t, http.StatusCreated, again.status)
	require.False(t, again.replayed())
	invariants.Assert(t, b.pool, "idem")
}

// On an Optional route a request without a key simply runs (no record, no
// dedupe); with a key it gets the full protocol.
func TestIdempotencyOptionalKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path := "/demo/accounts/user-0042/optional-debits"
	for range 2 {
		r, err := b.send(context.Background(), "user-0042", path, "", body30)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, r.status)
		require.False(t, r.replayed())
	}
	first, err := b.send(context.Background(), "user-0042", path, "k-opt-1", body30)
	require.NoError(t, err)
	again, err := b.send(context.Background(), "user-0042", path, "k-opt-1", body30)
	require.NoError(t, err)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)

	var effects, records int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM demo_effect`).Scan(&effects))
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_request`).Scan(&records))
	require.Equal(t, 3, effects)
	require.Equal(t, 1, records)
	invariants.Assert(t, b.pool, "idem")
}

func requireCounter(t *testing.T, reg *prometheus.Registry, want float64, name string, labels ...string) {
	t.Helper()
	v, ok, err := promx.Value(reg, name, labels...)
	require.NoError(t, err)
	require.True(t, ok, "no sample of %s%v", name, labels)
	require.Equal(t, want, v, "%s%v", name, labels)
}
