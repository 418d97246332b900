package points

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// All of the module's SQL (invariants.go reuses sqlDriftAll for PTS-I4).
//
// Lock order. A debit or a grant locks exactly two rows: the user account,
// then one shard of a system account. Every writer takes them in that
// order, and a transaction that holds a shard waits for nothing else, so
// no interleaving of debits, grants and repairs can deadlock. Inside one
// statement the order is forced by data dependency: the shard update reads
// the ledger_txn row, which is inserted from the user account's UPDATE …
// RETURNING, so no shard is touched before the user row is locked.
const (
	// sqlDebit is a whole debit in one statement. PTS-I1: the WHERE clause
	// is the second line of defence (balance_non_negative is the first).
	// Under READ COMMITTED a debit that waited for the row lock re-checks
	// the clause against the row as the previous debit left it, so
	// concurrent debits never overdraw. No row back: nothing was written,
	// and classifyRefusal says why.
	//
	// @account user account, @amount, @client acting client (must own the
	// account), @key idempotency key, @reason, @system sys:redemption, @shard.
	sqlDebit = `
WITH debited AS (
    UPDATE points_account
       SET balance = balance - @amount, version = version + 1
     WHERE id = @account AND kind = 'user' AND owner = @client
       AND balance >= @amount
 RETURNING balance, version
), txn AS (
    INSERT INTO points_ledger_txn (client_id, idem_key, kind, reason)
    SELECT @client, @key, 'debit', @reason FROM debited
 RETURNING id, created_at
), entries AS (
    INSERT INTO points_ledger_entry (txn_id, account_id, amount)
    SELECT txn.id, leg.account_id, leg.amount
      FROM txn, (VALUES (@account::text, -@amount::bigint), (@system::text, @amount::bigint)) AS leg (account_id, amount)
), system_side AS (
    UPDATE points_system_shard s
       SET balance = s.balance + @amount
      FROM txn
     WHERE s.account_id = @system AND s.shard = @shard
)
SELECT txn.id, txn.created_at, debited.balance, debited.version FROM debited, txn`

	// sqlGrant is sqlDebit's mirror: points leave sys:issuance (which may
	// go negative) and reach a user account. Any admin or service client
	// may grant, so there is no owner condition and no balance guard.
	//
	// @account user account, @amount, @client acting client, @key
	// idempotency key, @reason, @system sys:issuance, @shard.
	sqlGrant = `
WITH credited AS (
    UPDATE points_account
       SET balance = balance + @amount, version = version + 1
     WHERE id = @account AND kind = 'user'
 RETURNING balance, version
), txn AS (
    INSERT INTO points_ledger_txn (client_id, idem_key, kind, reason)
    SELECT @client, @key, 'grant', @reason FROM credited
 RETURNING id, created_at
), entries AS (
    INSERT INTO points_ledger_entry (txn_id, account_id, amount)
    SELECT txn.id, leg.account_id, leg.amount
      FROM txn, (VALUES (@account::text, @amount::bigint), (@system::text, -@amount::bigint)) AS leg (account_id, amount)
), system_side AS (
    UPDATE points_system_shard s
       SET balance = s.balance - @amount
      FROM txn
     WHERE s.account_id = @system AND s.shard = @shard
)
SELECT txn.id, txn.created_at, credited.balance, credited.version FROM credited, txn`

	// sqlPostingTarget reads what a refused debit or grant needs to say
	// why: unknown account, not a user account, not the caller's, or (for a
	// debit) not enough points at the moment the guarded UPDATE ran.
	sqlPostingTarget = `SELECT kind, owner, balance FROM points_account WHERE id = $1`

	sqlCreateAccount = `
INSERT INTO points_account (id, owner, kind) VALUES ($1, $2, 'user')
ON CONFLICT (id) DO NOTHING
RETURNING id, owner, kind, balance, version, created_at`

	// sqlGetAccount reads an account; a system account's balance is the
	// sum of its shards.
	sqlGetAccount = `
SELECT a.id, a.owner, a.kind,
       CASE a.kind WHEN 'user' THEN a.balance
            ELSE (SELECT coalesce(sum(s.balance), 0) FROM points_system_shard s WHERE s.account_id = a.id)::bigint
       END,
       a.version, a.created_at
  FROM points_account a
 WHERE a.id = $1`

	// sqlEntries is one page of an account's history, newest first, after
	// the cursor's transaction id (keyset pagination on the primary key
	// (account_id, txn_id): the page costs its own size, however deep).
	sqlEntries = `
SELECT e.txn_id, t.kind, e.amount, t.reason, t.created_at
  FROM points_ledger_entry e
  JOIN points_ledger_txn t ON t.id = e.txn_id
 WHERE e.account_id = $1 AND e.txn_id < $2
 ORDER BY e.txn_id DESC
 LIMIT $3`

	// sqlDriftAll compares every account's stored balance with the sum of
	// its entries (PTS-I4). One statement reads one snapshot, and every
	// ledger transaction writes its entries and its balances atomically,
	// so a drift it reports is real, never a transaction seen half-way.
	sqlDriftAll = `
WITH stored AS (
    SELECT a.id, a.kind,
           CASE a.kind WHEN 'user' THEN a.balance
                ELSE (SELECT coalesce(sum(s.balance), 0) FROM points_system_shard s WHERE s.account_id = a.id)::bigint
           END AS stored
      FROM points_account a
), summed AS (
    SELECT account_id, sum(amount)::bigint AS total FROM points_ledger_entry GROUP BY account_id
)
SELECT st.id AS account, st.kind, st.stored, coalesce(su.total, 0) AS from_entries,
       st.stored - coalesce(su.total, 0) AS drift
  FROM stored st LEFT JOIN summed su ON su.account_id = st.id
 WHERE st.stored <> coalesce(su.total, 0)
 ORDER BY st.id`

	// sqlDriftOne is sqlDriftAll for one account (no row: no drift).
	sqlDriftOne = `
SELECT a.id, a.kind, st.stored, su.total, st.stored - su.total
  FROM points_account a
 CROSS JOIN LATERAL (
    SELECT CASE a.kind WHEN 'user' THEN a.balance
                ELSE (SELECT coalesce(sum(s.balance), 0) FROM points_system_shard s WHERE s.account_id = a.id)::bigint
           END AS stored) st
 CROSS JOIN LATERAL (
    SELECT coalesce(sum(e.amount), 0)::bigint AS total FROM points_ledger_entry e WHERE e.account_id = a.id) su
 WHERE a.id = $1 AND st.stored <> su.total`

	sqlCountAccounts = `SELECT count(*) FROM points_account`

	// Repair, in one transaction per account, in three steps that must
	// stay separate statements: lock, then sum, then write. Under READ
	// COMMITTED each statement takes a new snapshot; the sum runs after the
	// lock was granted, so it sees every entry of every transaction that
	// changed the balance before us, and no other can commit until we do
	// (each needs the lock we hold). Locking and summing in one statement
	// would sum with the snapshot taken before the lock wait, miss the
	// entries of the transaction we waited for, and "repair" a correct
	// balance into a wrong one.
	//
	// sqlLockUser locks a user account and returns its stored balance.
	sqlLockUser = `SELECT balance FROM points_account WHERE id = $1 AND kind = 'user' FOR UPDATE`
	// sqlLockSystem locks every shard of a system account (in shard order,
	// the order any other shard-locker would use) and returns their sum.
	sqlLockSystem = `
SELECT coalesce(sum(balance), 0)::bigint
  FROM (SELECT balance FROM points_system_shard WHERE account_id = $1 ORDER BY shard FOR UPDATE) locked`
	sqlSumEntries = `SELECT coalesce(sum(amount), 0)::bigint FROM points_ledger_entry WHERE account_id = $1`
	// sqlRepairUser / sqlRepairSystem write the recomputed balance ($2 the
	// stored one, $3 the recomputed one) and its audit row. A system
	// account's correction goes to shard 0.
	sqlRepairUser = `
WITH fixed AS (
    UPDATE points_account SET balance = $3, version = version + 1 WHERE id = $1 AND kind = 'user'
)
INSERT INTO points_repair (account_id, stored, recomputed, actor) VALUES ($1, $2, $3, $4) RETURNING id`
	sqlRepairSystem = `
WITH fixed AS (
    UPDATE points_system_shard SET balance = balance + ($3::bigint - $2::bigint) WHERE account_id = $1 AND shard = 0
)
INSERT INTO points_repair (account_id, stored, recomputed, actor) VALUES ($1, $2, $3, $4) RETURNING id`
)

// SQLDebit is the debit statement as the product runs it. It is exported
// for one reader: the lab's naive debit (lab/points) runs this very
// statement minus its guard, so the naive version differs from the
// product by the guard alone (PTS-I1).
const SQLDebit = sqlDebit

// sqlDebit and sqlGrant run on every posting: rewritten to $n once
// (pg.Named), not on every call.
var (
	debitStmt = pg.MustNamed(sqlDebit)
	grantStmt = pg.MustNamed(sqlGrant)
)

// posting is what sqlDebit and sqlGrant take.
type posting struct {
	account, client, key, reason, system string
	amount                               int64
	shard                                int
}

// post runs debitStmt or grantStmt; ok is false when the guarded UPDATE
// matched no row (nothing was written).
func post(ctx context.Context, tx pgx.Tx, stmt pg.Named, p posting) (t Txn, ok bool, err error) {
	err = tx.QueryRow(ctx, stmt.SQL, stmt.Args(pgx.NamedArgs{
		"account": p.account, "amount": p.amount, "client": p.client, "key": p.key,
		"reason": p.reason, "system": p.system, "shard": p.shard,
	})...).Scan(&t.ID, &t.CreatedAt, &t.Balance, &t.Version)
	switch err = pg.MapError(err); {
	case errors.Is(err, pg.ErrNotFound):
		return Txn{}, false, nil
	case pg.Constraint(err) == "points_ledger_txn_client_key":
		return Txn{}, false, fmt.Errorf("%w: key %q", errDuplicateTxn, p.key)
	case err != nil:
		return Txn{}, false, fmt.Errorf("points: post %s: %w", p.account, err)
	}
	return t, true, nil
}

// postingTarget reads the account a refused posting named.
func postingTarget(ctx context.Context, db pg.Querier, id string) (kind, owner string, balance int64, err error) {
	err = pg.MapError(db.QueryRow(ctx, sqlPostingTarget, id).Scan(&kind, &owner, &balance))
	if errors.Is(err, pg.ErrNotFound) {
		return "", "", 0, fmt.Errorf("%w: %s", errAccountNotFound, id)
	}
	return kind, owner, balance, err
}

// createAccount inserts a user account; created is false if the id is taken.
func createAccount(ctx context.Context, db pg.Querier, id, owner string) (a Account, created bool, err error) {
	a, err = scanAccount(db.QueryRow(ctx, sqlCreateAccount, id, owner))
	if errors.Is(err, pg.ErrNotFound) {
		return Account{}, false, nil
	}
	return a, err == nil, err
}

func getAccount(ctx context.Context, db pg.Querier, id string) (Account, error) {
	a, err := scanAccount(db.QueryRow(ctx, sqlGetAccount, id))
	if errors.Is(err, pg.ErrNotFound) {
		return Account{}, fmt.Errorf("%w: %s", errAccountNotFound, id)
	}
	return a, err
}

func scanAccount(row pgx.Row) (Account, error) {
	var a Account
	err := row.Scan(&a.ID, &a.Owner, &a.Kind, &a.Balance, &a.Version, &a.CreatedAt)
	return a, pg.MapError(err)
}

// listEntries reads up to limit history lines of id older than txn before.
func listEntries(ctx context.Context, db pg.Querier, id string, before int64, limit int) ([]historyEntry, error) {
	rows, err := db.Query(ctx, sqlEntries, id, before, limit)
	if err != nil {
		return nil, fmt.Errorf("points: entries of %s: %w", id, pg.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (historyEntry, error) {
		var h historyEntry
		err := r.Scan(&h.TxnID, &h.Kind, &h.Amount, &h.Reason, &h.CreatedAt)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("points: entries of %s: %w", id, pg.MapError(err))
	}
	return out, nil
}

// drifts runs sqlDriftAll, or sqlDriftOne when id is given.
func drifts(ctx context.Context, db pg.Querier, id string) ([]Drift, error) {
	var rows pgx.Rows
	var err error
	if id == "" {
		rows, err = db.Query(ctx, sqlDriftAll)
	} else {
		rows, err = db.Query(ctx, sqlDriftOne, id)
	}
	if err != nil {
		return nil, fmt.Errorf("points: drift: %w", pg.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Drift, error) {
		var d Drift
		err := r.Scan(&d.AccountID, &d.Kind, &d.Stored, &d.FromEntries, &d.Drift)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("points: drift: %w", pg.MapError(err))
	}
	return out, nil
}

// repair recomputes one account's balance under its lock and writes it
// with an audit row if it still differs. d is the drift found under the
// lock (zero Drift when there is none left).
func repair(ctx context.Context, tx pgx.Tx, id, kind, actor string) (d Drift, err error) {
	lock, write := sqlLockUser, sqlRepairUser
	if kind == KindSystem {
		lock, write = sqlLockSystem, sqlRepairSystem
	}
	d = Drift{AccountID: id, Kind: kind}
	if err := tx.QueryRow(ctx, lock, id).Scan(&d.Stored); err != nil {
		return Drift{}, fmt.Errorf("points: repair %s: lock: %w", id, pg.MapError(err))
	}
	if err := tx.QueryRow(ctx, sqlSumEntries, id).Scan(&d.FromEntries); err != nil {
		return Drift{}, fmt.Errorf("points: repair %s: sum: %w", id, pg.MapError(err))
	}
	if d.Drift = d.Stored - d.FromEntries; d.Drift == 0 {
		return d, nil
	}
	if err := tx.QueryRow(ctx, write, id, d.Stored, d.FromEntries, actor).Scan(&d.RepairID); err != nil {
		return Drift{}, fmt.Errorf("points: repair %s: write: %w", id, pg.MapError(err))
	}
	d.Repaired = true
	return d, nil
}
