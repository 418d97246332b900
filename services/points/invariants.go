package points

import "github.com/fencelab/fencelab/core/invariant"

// chapter is the slug of the book's chapter 5 (core/lab.Chapters).
const chapter = "points"

// The points invariants (chapter 5). Each query returns the rows that break it.
var Invariants = []invariant.Invariant{

	{
		ID: "PTS-I1", Module: "points", Chapter: chapter,
		Statement: "a user account's balance is never negative",
		// The rows only: the CHECK that keeps them so is PTS-S1's (a
		// missing guard is a fact about the schema, not a broken balance).
		SQL: `
SELECT 'negative balance' AS problem, id AS account, balance
  FROM points_account WHERE kind = 'user' AND balance < 0`,
	},
	{
		ID: "PTS-I2", Module: "points", Chapter: chapter,
		Statement: "one (client, idempotency key) makes at most one ledger transaction, and a recorded 201 names the transaction it made",
		// The unique key re-checked; then both directions between the
		// idempotency records (while retained) and the ledger: every
		// recorded 201 has its transaction, the one its body names, and
		// no transaction exists under a key whose record told the client
		// something else — except duplicate_transaction, the answer to a
		// key re-used after its first record was purged, which says
		// exactly that the transaction exists. (A record still in flight
		// cannot belong to a committed transaction but in that re-use, so
		// only finished records are compared.)
		SQL: `
SELECT 'more than one transaction' AS problem, client_id, idem_key, count(*)::text AS detail
  FROM points_ledger_txn GROUP BY client_id, idem_key HAVING count(*) > 1
UNION ALL
SELECT 'recorded 201 without the transaction its body names', r.subject, r.key, convert_from(r.body, 'UTF8')
  FROM idem_request r
 WHERE r.scope IN ('points.debit', 'points.grant') AND r.state = 'done' AND r.status = 201
   AND NOT EXISTS (SELECT 1 FROM points_ledger_txn t
                    WHERE t.client_id = r.subject AND t.idem_key = r.key
                      AND 'points.' || t.kind = r.scope
                      AND t.id = (convert_from(r.body, 'UTF8')::jsonb ->> 'id')::bigint)
UNION ALL
SELECT 'transaction under a key whose record answered otherwise', t.client_id, t.idem_key,
       r.scope || ' ' || r.state || ' ' || coalesce(r.status::text, '')
  FROM points_ledger_txn t
  JOIN idem_request r ON r.subject = t.client_id AND r.key = t.idem_key AND r.scope = 'points.' || t.kind
 WHERE r.state = 'done' AND r.status <> 201
   AND NOT (r.status = 409 AND convert_from(r.body, 'UTF8')::jsonb ->> 'code' = 'duplicate_transaction')`,
	},
	{
		ID: "PTS-I3", Module: "points", Chapter: chapter,
		Statement: "every ledger transaction has at least two entries and they sum to zero; every entry names an account",
		SQL: `
SELECT 'unbalanced or single-sided transaction' AS problem, t.id::text AS txn, count(e.txn_id) AS entries,
       coalesce(sum(e.amount), 0) AS total
  FROM points_ledger_txn t LEFT JOIN points_ledger_entry e ON e.txn_id = t.id
 GROUP BY t.id
HAVING count(e.txn_id) < 2 OR coalesce(sum(e.amount), 0) <> 0
UNION ALL
SELECT 'entry of an unknown account', e.txn_id || ' ' || e.account_id, 1, e.amount
  FROM points_ledger_entry e
 WHERE NOT EXISTS (SELECT 1 FROM points_account a WHERE a.id = e.account_id)`,
	},
	{
		ID: "PTS-I4", Module: "points", Chapter: chapter,
		Statement: "every account's stored balance equals the sum of its entries (repair: POST /points/admin/recompute?repair=true)",
		SQL:       sqlDriftAll,
	},
	{
		ID: "PTS-I5", Module: "points", Chapter: chapter,
		Statement: "ledger entries, transactions and repairs are never updated or deleted",
		// The guard must exist and fire always (tgenabled 'A', so even
		// session_replication_role = replica cannot silence it). And the
		// evidence: an entry rewritten after its transaction carries
		// another xmin than the transaction row that was inserted with it
		// (PostgreSQL keeps the original xmin through freezing).
		SQL: `
SELECT 'entry rewritten after its transaction' AS problem, e.txn_id || ' ' || e.account_id AS detail
  FROM points_ledger_entry e JOIN points_ledger_txn t ON t.id = e.txn_id
 WHERE NOT (e.xmin = t.xmin)`,
	},
	{
		ID: "PTS-S1", Module: "points", Chapter: chapter, Schema: true,
		Statement: "the points schema keeps its guards: the validated CHECK (balance >= 0) behind PTS-I1 and the always-enabled append-only triggers behind PTS-I5",
		// The first line of defence, checked apart from the rows it
		// guards: a dropped or NOT VALID constraint is a fact about the
		// schema; a negative balance is a fact about the data (PTS-I1).
		SQL: `
SELECT 'balance_non_negative constraint missing or not validated' AS problem, 'points_account' AS detail
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'points_account'::regclass AND conname = 'balance_non_negative'
                      AND contype = 'c' AND convalidated)
UNION ALL
SELECT 'append-only trigger missing or not always enabled', want.tbl || ' ' || want.tg
  FROM (VALUES ('points_ledger_entry'), ('points_ledger_txn'), ('points_repair')) AS t (tbl)
 CROSS JOIN LATERAL (VALUES (t.tbl, 'points_append_only'), (t.tbl, 'points_append_only_truncate')) AS want (tbl, tg)
 WHERE NOT EXISTS (SELECT 1 FROM pg_trigger g
                    WHERE g.tgrelid = want.tbl::regclass AND g.tgname = want.tg AND g.tgenabled = 'A')`,
	},
}
