package points

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
)

// Service holds the ledger's rules. Debits and grants run inside the
// caller's transaction (the idempotency record's, see handlers.go), so the
// ledger transaction, its entries, both balances, the outbox event and the
// recorded response commit together or not at all.
type Service struct {
	db     *pgxpool.Pool
	shards int
}

// NewService builds the service from the shared dependencies and its
// settings (LoadConfig).
func NewService(d app.Deps, cfg Config) (*Service, error) {
	if cfg.SystemShards < 1 || cfg.SystemShards > MaxSystemShards {
		cfg.SystemShards = DefaultSystemShards
	}
	return &Service{db: d.Pool, shards: cfg.SystemShards}, nil
}

// ValidatePosting checks a debit's or grant's account id and body before
// anything is recorded, so a client can fix a refused body and reuse its
// idempotency key.
func validatePosting(accountID string, req PostingRequest) error {
	if !validAccountID(accountID) {
		return errAccountID(accountID)
	}
	return req.validate()
}

// Debit moves req.Amount points from user account id, which actor must
// own, to sys:redemption, and appends the points.debited event — all in
// tx. key is the client's idempotency key (PTS-I2).
//
// Errors: errInsufficientBalance (PTS-I1), ErrAccountNotFound, ErrNotOwner,
// ErrDuplicateTxn, and the validation errors.
func (s *Service) Debit(ctx context.Context, tx pgx.Tx, actor, key, id string, req PostingRequest) (Txn, error) {
	t, _, err := s.debit(ctx, tx, actor, key, id, req)
	return t, err
}

// debit is Debit that also returns the transaction's JSON, encoded once
// for both the outbox event and the response.
func (s *Service) debit(ctx context.Context, tx pgx.Tx, actor, key, id string, req PostingRequest) (Txn, []byte, error) {
	if err := validatePosting(id, req); err != nil {
		return Txn{}, nil, err
	}
	p := posting{account: id, client: actor, key: key, reason: req.Reason, system: RedemptionAccount,
		amount: req.Amount, shard: s.shard()}
	t, ok, err := post(ctx, tx, debitStmt, p)
	if err != nil {
		return Txn{}, nil, err
	}
	if !ok {
		return Txn{}, nil, refusedDebit(ctx, tx, id, actor, req.Amount)
	}
	return s.posted(ctx, tx, t, txnDebit, topicDebited, p, entry{id, -req.Amount}, entry{RedemptionAccount, req.Amount})
}

// Grant moves req.Amount points from sys:issuance to user account id and
// appends the points.granted event, in tx. The route admits only admin
// and service clients.
func (s *Service) Grant(ctx context.Context, tx pgx.Tx, actor, key, id string, req PostingRequest) (Txn, error) {
	t, _, err := s.grant(ctx, tx, actor, key, id, req)
	return t, err
}

// grant is Grant that also returns the transaction's JSON (see debit).
func (s *Service) grant(ctx context.Context, tx pgx.Tx, actor, key, id string, req PostingRequest) (Txn, []byte, error) {
	if err := validatePosting(id, req); err != nil {
		return Txn{}, nil, err
	}
	p := posting{account: id, client: actor, key: key, reason: req.Reason, system: IssuanceAccount,
		amount: req.Amount, shard: s.shard()}
	t, ok, err := post(ctx, tx, grantStmt, p)
	if err != nil {
		return Txn{}, nil, err
	}
	if !ok {
		kind, _, _, err := postingTarget(ctx, tx, id)
		if err != nil {
			return Txn{}, nil, err
		}
		return Txn{}, nil, fmt.Errorf("%w: %s is a %s account", errNotUserAccount, id, kind)
	}
	return s.posted(ctx, tx, t, txnGrant, topicGranted, p, entry{IssuanceAccount, -req.Amount}, entry{id, req.Amount})
}

// shard picks the system-account shard this transaction adds to. Random:
// two transactions then wait for each other on the system side with
// probability 1/shards, instead of always (see the README's measurements).
func (s *Service) shard() int { return rand.IntN(s.shards) }

// posted completes a transaction that was written: its outbox event, one
// per ledger transaction, in the same transaction. The event carries the
// same JSON as the response, encoded once. outbox.Queue lets the INSERT
// travel with the transaction's COMMIT when tx pipelines (core/idem's
// effect transactions): the event still commits with the ledger rows or
// not at all.
func (s *Service) posted(ctx context.Context, tx pgx.Tx, t Txn, kind, topic string, p posting, entries ...entry) (Txn, []byte, error) {
	t.Kind, t.AccountID, t.Amount, t.Reason, t.Entries = kind, p.account, p.amount, p.reason, entries
	body, err := json.Marshal(t)
	if err != nil {
		return Txn{}, nil, fmt.Errorf("points: encode transaction: %w", err)
	}
	if err := outbox.Queue(ctx, tx, topic, p.account, json.RawMessage(body)); err != nil {
		return Txn{}, nil, err
	}
	return t, body, nil
}

// refusedDebit says why the guarded UPDATE matched nothing. The balance is
// read after the refusal and may have moved since; the refusal itself was
// decided under the row lock.
func refusedDebit(ctx context.Context, q pg.Querier, id, actor string, amount int64) error {
	kind, owner, balance, err := postingTarget(ctx, q, id)
	switch {
	case err != nil:
		return err
	case owner != actor:
		return fmt.Errorf("%w: %s", errNotOwner, id)
	case kind != kindUser:
		return fmt.Errorf("%w: %s is a %s account", errNotUserAccount, id, kind)
	}
	return fmt.Errorf("%w: %s holds %d points, the debit needs %d", errInsufficientBalance, id, balance, amount)
}

// CreateAccount creates a user account owned by req.Owner with balance 0,
// under req.ID or a generated id.
func (s *Service) CreateAccount(ctx context.Context, q pg.Querier, req CreateAccountRequest) (Account, error) {
	if !httpx.ValidSubject(req.Owner) {
		return Account{}, fmt.Errorf("%w: owner must be a user id such as user-0042", errInvalidOwner)
	}
	if httpx.Reserved(req.Owner) {
		return Account{}, fmt.Errorf("%w: %q is reserved for the system accounts", errInvalidOwner, req.Owner)
	}
	id := req.ID
	if id == "" {
		id = "acct-" + strings.ToLower(crand.Text()[:16])
	}
	if !validUserAccountID(id) {
		return Account{}, errAccountID(id)
	}
	a, created, err := createAccount(ctx, q, id, req.Owner)
	switch {
	case err != nil:
		return Account{}, err
	case !created:
		return Account{}, fmt.Errorf("%w: %s", errAccountExists, id)
	}
	return a, nil
}

// Account returns account id if p owns it or is an admin.
func (s *Service) Account(ctx context.Context, p httpx.Principal, id string) (Account, error) {
	if !validAccountID(id) {
		return Account{}, errAccountID(id)
	}
	a, err := getAccount(ctx, s.db, id)
	if err != nil {
		return Account{}, err
	}
	if !p.CanActFor(a.Owner) {
		return Account{}, fmt.Errorf("%w: %s", errNotOwner, id)
	}
	return a, nil
}

// Entries returns one page of account id's history, newest first. cursor
// is the previous page's NextCursor ("" for the first page).
func (s *Service) Entries(ctx context.Context, p httpx.Principal, id, cursor string, limit int) (EntryPage, error) {
	if limit < 1 || limit > maxPageSize {
		return EntryPage{}, fmt.Errorf("%w: limit must be in 1..%d", errInvalidLimit, maxPageSize)
	}
	before, err := decodeCursor(cursor)
	if err != nil {
		return EntryPage{}, err
	}
	if _, err := s.Account(ctx, p, id); err != nil {
		return EntryPage{}, err
	}
	// One more than asked tells whether another page exists.
	es, err := listEntries(ctx, s.db, id, before, limit+1)
	if err != nil {
		return EntryPage{}, err
	}
	page := EntryPage{AccountID: id, Entries: es}
	if len(es) > limit {
		page.Entries = es[:limit]
		page.NextCursor = encodeCursor(es[limit-1].TxnID)
	}
	return page, nil
}

// The cursor is opaque to clients: base64url of "v1:" and the last
// transaction id shown. It is not signed: a forged one can only move the
// caller within an account they may already read.
func encodeCursor(before int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(before, 10)))
}

func decodeCursor(c string) (int64, error) {
	if c == "" {
		return 1<<63 - 1, nil
	}
	bad := fmt.Errorf("%w: pass next_cursor from the previous page as it is", errInvalidCursor)
	if len(c) > 64 {
		return 0, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, bad
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(string(raw), "v1:"), 10, 64)
	if err != nil || n < 1 || !strings.HasPrefix(string(raw), "v1:") {
		return 0, bad
	}
	return n, nil
}

// Recompute compares stored balances with the sums of entries — every
// account's, or only id's — and reports each drift (PTS-I4). With repair,
// each drifted account is fixed in its own transaction that locks it,
// recomputes under the lock and records the repair; actor is who asked.
func (s *Service) Recompute(ctx context.Context, actor, id string, repairDrift bool) (RecomputeReport, error) {
	var rep RecomputeReport
	if id != "" {
		if !validAccountID(id) {
			return rep, errAccountID(id)
		}
		if _, err := getAccount(ctx, s.db, id); err != nil {
			return rep, err
		}
	}
	// The count and the drifts from one snapshot.
	err := pg.InTxOpts(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rep.Checked = 1
		if id == "" {
			if err := tx.QueryRow(ctx, sqlCountAccounts).Scan(&rep.Checked); err != nil {
				return err
			}
		}
		var err error
		rep.Accounts, err = drifts(ctx, tx, id)
		return err
	})
	if err != nil {
		return RecomputeReport{}, err
	}
	rep.Drifted = len(rep.Accounts)
	if rep.Accounts == nil {
		rep.Accounts = []Drift{}
	}
	if !repairDrift {
		return rep, nil
	}
	for i, d := range rep.Accounts {
		var fixed Drift
		err := pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
			var err error
			fixed, err = repair(ctx, tx, d.AccountID, d.Kind, actor)
			return err
		})
		if err != nil {
			return RecomputeReport{}, err
		}
		if fixed.Repaired { // else: repaired meanwhile by someone else
			rep.Accounts[i] = fixed
			rep.Repaired++
		}
	}
	return rep, nil
}

// seedAccounts are the demo accounts `fencelab dev` creates.
var seedAccounts = []struct {
	id, owner string
	grant     int64
}{
	{"acct-0042", "user-0042", 1000},
	{"acct-0043", "user-0043", 1000},
}

// SeedClient is the client id of the seed's grants.
const SeedClient = "fencelab-seed"

// seed creates the demo accounts and their welcome grants. It is
// idempotent: the account insert does nothing if the id exists, and the
// grant's key can make one transaction only (PTS-I2).
func (s *Service) seed(ctx context.Context) error {
	for _, a := range seedAccounts {
		if _, _, err := createAccount(ctx, s.db, a.id, a.owner); err != nil {
			return err
		}
		err := pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
			_, err := s.Grant(ctx, tx, SeedClient, "welcome-"+a.id, a.id, PostingRequest{Amount: a.grant, Reason: "welcome"})
			return err
		})
		if err != nil && !errors.Is(err, errDuplicateTxn) {
			return err
		}
	}
	return nil
}
