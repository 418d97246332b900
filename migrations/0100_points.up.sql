-- Points ledger (spec 20; the book's points-account chapter): simulated
-- points in double entry. Every ledger transaction moves points between a
-- user account and a system account; its entries sum to zero (PTS-I3) and
-- every stored balance equals the sum of its account's entries (PTS-I4).

-- Accounts. A user account's balance is a column guarded by
-- balance_non_negative (PTS-I1, first line: the debit's WHERE clause is
-- the second). A system account (sys:issuance, sys:redemption) is the
-- other side of every entry and may go negative; its balance is not this
-- column but the sum of its shards (points_system_shard), so that the
-- system side of concurrent transactions does not serialise on one row.
CREATE TABLE points_account (
    id         text        PRIMARY KEY,
    owner      text        NOT NULL CHECK (length(owner) BETWEEN 1 AND 128),
    kind       text        NOT NULL CHECK (kind IN ('user', 'system')),
    balance    bigint      NOT NULL DEFAULT 0,
    version    bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT points_account_id_format CHECK (
        (kind = 'user' AND id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
     OR (kind = 'system' AND id ~ '^sys:[a-z]{1,32}$')),
    CONSTRAINT balance_non_negative CHECK (kind <> 'user' OR balance >= 0),
    CONSTRAINT points_account_system_balance_in_shards CHECK (kind = 'user' OR (balance = 0 AND version = 0))
) WITH (fillfactor = 80); -- room for HOT updates of the balance

-- A system account's balance, split over shards: a transaction adds its
-- system-side amount to one shard chosen at random, so two transactions
-- wait for each other only when they pick the same shard. The balance is
-- the sum over every shard row, whatever the configured shard count.
CREATE TABLE points_system_shard (
    account_id text     NOT NULL REFERENCES points_account (id),
    shard      smallint NOT NULL CHECK (shard BETWEEN 0 AND 63),
    balance    bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, shard)
) WITH (fillfactor = 20);

INSERT INTO points_account (id, owner, kind) VALUES
    ('sys:issuance', 'fencelab', 'system'),
    ('sys:redemption', 'fencelab', 'system');
INSERT INTO points_system_shard (account_id, shard)
SELECT a, s FROM unnest(ARRAY['sys:issuance', 'sys:redemption']) AS a, generate_series(0, 63) AS s;

-- One row per ledger transaction. PTS-I2, first line: a client's
-- idempotency key makes at most one transaction, whatever happened to the
-- idem_request record (purged after its retention, or another scope).
CREATE TABLE points_ledger_txn (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id  text        NOT NULL CHECK (length(client_id) BETWEEN 1 AND 128),
    idem_key   text        NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    kind       text        NOT NULL CHECK (kind IN ('debit', 'grant')),
    reason     text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT points_ledger_txn_client_key UNIQUE (client_id, idem_key)
);

-- Signed entries: one per account a transaction touches. The primary key
-- serves an account's history (keyset pagination on txn_id) and its sum.
--
-- No foreign key to points_account, on purpose: the check would take a
-- KEY SHARE lock on sys:redemption (or sys:issuance) in every transaction,
-- and many concurrent lockers of one row make PostgreSQL build a new
-- multixact per locker — the hot row we shard away above. PTS-I3 reports
-- entries of unknown accounts instead.
CREATE TABLE points_ledger_entry (
    txn_id     bigint NOT NULL REFERENCES points_ledger_txn (id),
    account_id text   NOT NULL,
    amount     bigint NOT NULL CHECK (amount <> 0),
    PRIMARY KEY (account_id, txn_id)
);

-- Every repair made by recompute: what the column said, what the entries
-- say. Append-only like the ledger.
CREATE TABLE points_repair (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id  text        NOT NULL,
    stored      bigint      NOT NULL,
    recomputed  bigint      NOT NULL,
    actor       text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 128),
    repaired_at timestamptz NOT NULL DEFAULT now(),
    CHECK (stored <> recomputed)
);

-- PTS-I5: the ledger is append-only. Statement-level triggers refuse every
-- UPDATE, DELETE and TRUNCATE, even one that matches no row. ENABLE ALWAYS
-- makes them fire under session_replication_role = replica too, which
-- would otherwise silence an ordinary trigger; PTS-I5 checks both.
CREATE FUNCTION points_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'points: % is append-only; % refused (PTS-I5)', TG_TABLE_NAME, TG_OP;
END
$$;

CREATE TRIGGER points_append_only BEFORE UPDATE OR DELETE ON points_ledger_entry
    FOR EACH STATEMENT EXECUTE FUNCTION points_append_only();
CREATE TRIGGER points_append_only_truncate BEFORE TRUNCATE ON points_ledger_entry
    FOR EACH STATEMENT EXECUTE FUNCTION points_append_only();
CREATE TRIGGER points_append_only BEFORE UPDATE OR DELETE ON points_ledger_txn
    FOR EACH STATEMENT EXECUTE FUNCTION points_append_only();
CREATE TRIGGER points_append_only_truncate BEFORE TRUNCATE ON points_ledger_txn
    FOR EACH STATEMENT EXECUTE FUNCTION points_append_only();
CREATE TRIGGER points_append_only BEFORE UPDATE OR DELETE ON points_repair
    FOR EACH STATEMENT EXECUTE FUNCTION points_append_only();
CREATE TRIGGER points_append_only_truncate BEFORE TRUNCATE ON points_repair
    FOR EACH STATEMENT EXECUTE FUNCTION points_append_only();

ALTER TABLE points_ledger_entry ENABLE ALWAYS TRIGGER points_append_only;
ALTER TABLE points_ledger_entry ENABLE ALWAYS TRIGGER points_append_only_truncate;
ALTER TABLE points_ledger_txn ENABLE ALWAYS TRIGGER points_append_only;
ALTER TABLE points_ledger_txn ENABLE ALWAYS TRIGGER points_append_only_truncate;
ALTER TABLE points_repair ENABLE ALWAYS TRIGGER points_append_only;
ALTER TABLE points_repair ENABLE ALWAYS TRIGGER points_append_only_truncate;
