-- core/outbox: events appended inside business transactions, read by
-- consumers in (tx_id, id) order below the oldest running transaction.
--
-- tx_id is the appending transaction's top-level xid8. id comes from an
-- identity column, assigned at insert, so ids do not follow commit order; a
-- consumer that read "id > last" would skip an event whose transaction
-- commits after a higher-numbered one. Reading only tx_id <
-- pg_snapshot_xmin(pg_current_snapshot()) — the technique watermill-sql
-- uses — reads a prefix that can no longer change (docs/DEVELOPING.md
-- carries the argument).
CREATE TABLE outbox_event (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id      xid8        NOT NULL DEFAULT pg_current_xact_id(),
    topic      text        NOT NULL CHECK (topic ~ '^[a-z][a-z0-9_.-]{0,63}$'),
    key        text        NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The consumers' read order.
CREATE INDEX outbox_event_order ON outbox_event (tx_id, id);

-- One row per consumer: its subscription, its position (the last (tx_id,
-- id) pair it has processed, or (horizon, 0) after an empty read) and the
-- lease that decides which runner may advance it. The row is never deleted,
-- so the fence only grows.
CREATE TABLE outbox_consumer (
    name         text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_.-]{0,63}$'),
    topics       text[]      NOT NULL CHECK (cardinality(topics) BETWEEN 1 AND 32),
    position_tx  xid8        NOT NULL DEFAULT '0',
    position_id  bigint      NOT NULL DEFAULT 0,
    processed    bigint      NOT NULL DEFAULT 0,
    owner        text,
    fence        bigint      NOT NULL DEFAULT 0,
    lease_until  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_consumer_owner_leased CHECK ((owner IS NULL) = (lease_until IS NULL))
);

-- The inbox: one row per event a consumer has applied, written in the same
-- transaction as the consumer's effect. The primary key is what makes a
-- redelivered event a no-op (OUTBOX-I1/I2 read it). No foreign key to
-- outbox_event on purpose: a key-share lock on the event row per
-- consumption would dirty event pages and serialise consumers; OUTBOX-I1
-- checks the reference instead.
CREATE TABLE outbox_inbox (
    consumer     text        NOT NULL,
    event_id     bigint      NOT NULL,
    fence        bigint      NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- The demo consumer's effect (FENCELAB_OUTBOX_DEMO=1, the two-process
-- experiment and `fencelab bench outbox`). Deliberately no unique key on
-- event_id: a double effect must be visible as two rows, so that "exactly
-- once" is the inbox's and the fence's doing, not a constraint's.
CREATE TABLE outbox_demo_effect (
    seq        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   bigint      NOT NULL,
    key        text        NOT NULL,
    n          bigint      NOT NULL,
    owner      text        NOT NULL,
    fence      bigint      NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
