-- pgbench custom script: one debit as `fencelab bench points` makes it
-- over HTTP — the same SQL statements, in the same two transactions, in
-- as many round trips as the server spends on them where pgbench can.
--   1. core/idem claims the key in a short transaction committed without
--      waiting for its WAL flush (core/idem/store.go sqlBegin; pgbench has
--      no presence session, so its records name no owner). The server
--      sends it as one pipelined round trip; pgbench 15 cannot (\gset,
--      needed for the fence, is not allowed in a pipeline), so here it
--      costs four.
--   2. the effect transaction (pg.InPipelinedTx) in two round trips: BEGIN
--      with the debit (services/points/store.go sqlDebit); then the
--      outbox event (core/outbox sqlAppend), the response stored under
--      the fence (core/idem sqlFinish, which fails — and with it the
--      COMMIT behind it — if the fence is gone) and the COMMIT.
-- Statements are copied verbatim with each parameter replaced by a
-- variable (TestPgbenchScriptRunsTheServiceSQL and
-- TestPgbenchScriptRunsTheFinishSQL keep them in step).
-- Run with -M prepared and the variables bench/pgbench/points-vars.sh sets
-- (accounts, shards, sysacct, scope, reason, fingerprint, lockttl, topic,
-- status, ctype, body). Accounts are 100001 and up, owned by the user of
-- the same name, so one variable stands for both. The scope is not
-- points.debit, so PTS-I2 does not expect the fixed body to name the
-- transaction.
\set aid random(100001, 100000 + :accounts)
\set amount random(1, 10)
\set shard random(0, :shards - 1)
\set key random(1, 9223372036854775806)
BEGIN;
SET LOCAL synchronous_commit = off;
INSERT INTO idem_request AS r (scope, subject, key, fingerprint, state, locked_until, owner_pid, owner_started)
VALUES (:scope, :aid, :key, :fingerprint, 'in_flight', now() + :lockttl * interval '1 millisecond', NULL, NULL)
ON CONFLICT (scope, subject, key) DO UPDATE
   SET fence         = nextval('idem_fence'),
       takeovers     = r.takeovers + 1,
       locked_until  = EXCLUDED.locked_until,
       owner_pid     = EXCLUDED.owner_pid,
       owner_started = EXCLUDED.owner_started
 WHERE CASE WHEN r.state <> 'in_flight' OR r.fingerprint <> EXCLUDED.fingerprint THEN false
            WHEN r.locked_until <= now() THEN true
            ELSE (r.owner_pid IS NOT NULL AND NOT EXISTS (
              SELECT 1 FROM pg_stat_get_activity(r.owner_pid) a
               WHERE a.backend_start = r.owner_started OR a.backend_start IS NULL)) END
RETURNING r.fence, r.takeovers \gset
COMMIT;
\startpipeline
BEGIN;
WITH debited AS (
    UPDATE points_account
       SET balance = balance - :amount, version = version + 1
     WHERE id = :aid AND kind = 'user' AND owner = :aid
       AND balance >= :amount
 RETURNING balance, version
), txn AS (
    INSERT INTO points_ledger_txn (client_id, idem_key, kind, reason)
    SELECT :aid, :key, 'debit', :reason FROM debited
 RETURNING id, created_at
), entries AS (
    INSERT INTO points_ledger_entry (txn_id, account_id, amount)
    SELECT txn.id, leg.account_id, leg.amount
      FROM txn, (VALUES (:aid::text, -:amount::bigint), (:sysacct::text, :amount::bigint)) AS leg (account_id, amount)
), system_side AS (
    UPDATE points_system_shard s
       SET balance = s.balance + :amount
      FROM txn
     WHERE s.account_id = :sysacct AND s.shard = :shard
)
SELECT txn.id, txn.created_at, debited.balance, debited.version FROM debited, txn;
\endpipeline
\startpipeline
INSERT INTO outbox_event (topic, key, payload) VALUES (:topic, :aid, :body) RETURNING id;
WITH finished AS (
    UPDATE idem_request
       SET state = 'done', status = :status, content_type = :ctype, body = :body,
           locked_until = NULL, finished_at = now(), owner_pid = NULL, owner_started = NULL
     WHERE scope = :scope AND subject = :aid AND key = :key
       AND fence = :fence AND state = 'in_flight'
 RETURNING 1
)
SELECT CASE n WHEN 1 THEN n ELSE ('idem: fence lost, records finished: ' || n)::int END
  FROM (SELECT count(*)::int AS n FROM finished) f;
COMMIT;
\endpipeline
