-- psql -v accounts=N -f bench/pgbench/points-setup.sql: the accounts the
-- pgbench script debits, ids 100001 … 100000+N, each owned by the user of
-- the same name and opened with 1,000,000 points by one grant through the
-- ledger (transaction, two entries, both balances), so that every points
-- invariant keeps holding. Idempotent: existing accounts are left alone.
BEGIN;
INSERT INTO points_account (id, owner, kind)
SELECT g::text, g::text, 'user' FROM generate_series(100001, 100000 + :accounts) AS g
ON CONFLICT (id) DO NOTHING;

WITH need AS (
    SELECT g::text AS account_id FROM generate_series(100001, 100000 + :accounts) AS g
     WHERE NOT EXISTS (SELECT 1 FROM points_ledger_txn t
                        WHERE t.client_id = 'pgbench-setup' AND t.idem_key = g::text)
), txn AS (
    INSERT INTO points_ledger_txn (client_id, idem_key, kind, reason)
    SELECT 'pgbench-setup', account_id, 'grant', 'pgbench opening' FROM need
 RETURNING id, idem_key AS account_id
), entries AS (
    INSERT INTO points_ledger_entry (txn_id, account_id, amount)
    SELECT id, account_id, 1000000 FROM txn
    UNION ALL
    SELECT id, 'sys:issuance', -1000000 FROM txn
), credited AS (
    UPDATE points_account a SET balance = a.balance + 1000000, version = a.version + 1
      FROM txn WHERE a.id = txn.account_id
)
UPDATE points_system_shard SET balance = balance - 1000000 * (SELECT count(*) FROM txn)
 WHERE account_id = 'sys:issuance' AND shard = 0;
COMMIT;
