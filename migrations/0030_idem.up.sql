-- core/idem: one row per (scope, subject, key) — the IETF Idempotency-Key
-- record. The primary key is IDEM-I1's first line: a key can be recorded
-- once per scope and subject, whatever the concurrency.
--
-- fence comes from a sequence, not a per-row counter, so it never repeats
-- even after a row is released (deleted) or purged and the key recorded
-- again: a stalled request can never match a newer record's fence.
CREATE SEQUENCE idem_fence AS bigint;

CREATE TABLE idem_request (
    scope        text        NOT NULL CHECK (scope ~ '^[a-z][a-z0-9_.:-]{0,63}$'),
    subject      text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 128),
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint  bytea       NOT NULL CHECK (length(fingerprint) = 32),
    state        text        NOT NULL CHECK (state IN ('in_flight', 'done')),
    fence        bigint      NOT NULL DEFAULT nextval('idem_fence'),
    takeovers    int         NOT NULL DEFAULT 0,
    locked_until timestamptz,
    status       int         CHECK (status BETWEEN 200 AND 499),
    content_type text,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    PRIMARY KEY (scope, subject, key),
    -- An in-flight record carries a lock expiry; a finished one carries the
    -- response and nothing else.
    CONSTRAINT idem_request_in_flight_locked CHECK (
        (state = 'in_flight' AND locked_until IS NOT NULL AND status IS NULL AND body IS NULL)
     OR (state = 'done' AND locked_until IS NULL AND status IS NOT NULL AND body IS NOT NULL
         AND content_type IS NOT NULL AND finished_at IS NOT NULL))
);

-- The retention purge walks the oldest records first.
CREATE INDEX idem_request_created_at ON idem_request (created_at);
