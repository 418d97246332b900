-- Claim engine (chapter 14): the durable job table and its event history.

CREATE TABLE job (
    id           bigserial   PRIMARY KEY,
    kind         text        NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_.:-]{0,99}$'),
    -- Enqueue is idempotent per (kind, business_key): the same business
    -- operation can be submitted any number of times and exists once.
    business_key text        NOT NULL CHECK (char_length(business_key) BETWEEN 1 AND 256),
    state        text        NOT NULL DEFAULT 'ready'
                 CHECK (state IN ('ready', 'running', 'unknown', 'succeeded', 'failed', 'needs_review', 'cancelled')),
    payload      jsonb       NOT NULL DEFAULT '{}',
    due_at       timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- Durable attempt budget: never reset to dodge max_attempts (14.5).
    attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    owner        text,
    -- The fencing token: raised by every claim, recovery and resolution;
    -- a write must carry the value its writer was granted.
    fence        bigint      NOT NULL DEFAULT 0 CHECK (fence >= 0),
    lease_until  timestamptz,
    last_error   text,
    result       jsonb,
    CONSTRAINT job_kind_business_key_key UNIQUE (kind, business_key),
    -- CLAIM-I1, first line: a running job always has an owner, a fence and a lease.
    CONSTRAINT job_running_is_owned CHECK (
        state <> 'running' OR (owner IS NOT NULL AND fence > 0 AND lease_until IS NOT NULL))
);

-- A queue table churns: every claim and completion leaves a dead tuple, and
-- the claim's plan (an ordered scan of job_ready_idx under LIMIT) depends on
-- fresh statistics after a burst of enqueues. Vacuum and analyze it early.
ALTER TABLE job SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
                     autovacuum_vacuum_insert_scale_factor = 0.02);

-- The claim scan: ready jobs in (due_at, created_at) order.
CREATE INDEX job_ready_idx ON job (due_at, created_at, id) WHERE state = 'ready';
-- RecoverExpired's scan: running jobs by lease expiry.
CREATE INDEX job_running_lease_idx ON job (lease_until) WHERE state = 'running';
-- The resolver's scan, and the queue-depth metric for states that need attention.
CREATE INDEX job_attention_idx ON job (state, due_at) WHERE state IN ('unknown', 'failed', 'needs_review');

-- Every claim, heartbeat loss, completion, stale rejection, recovery,
-- unknown and resolution, with the fence its actor carried. Append-only.
-- There is deliberately no foreign key to job: the history is written in the
-- same statement as the transition it records, and an FK check per row would
-- double the cost of the hottest statements; CLAIM-I2 checks the pairing.
CREATE TABLE job_event (
    id     bigserial   NOT NULL,
    job_id bigint      NOT NULL,
    event  text        NOT NULL CHECK (event IN (
               'claimed', 'heartbeat_lost', 'succeeded', 'retry_scheduled', 'failed', 'cancelled',
               'rejected_stale', 'recovered', 'unknown', 'resolving', 'resolved_found',
               'resolved_absent', 'needs_review')),
    fence  bigint      NOT NULL,
    owner  text,
    -- The job's state after the event (for rejected_stale / heartbeat_lost:
    -- the state the stale actor found, unchanged by it).
    state  text,
    at     timestamptz NOT NULL DEFAULT now(),
    detail text,
    -- One index serves both identity and "a job's history in order": two
    -- events are written per attempt, so every index here is paid twice.
    PRIMARY KEY (job_id, id)
);
-- CLAIM-I3, first line: one claim per (job, fence).
CREATE UNIQUE INDEX job_event_one_claim_per_fence ON job_event (job_id, fence) WHERE event = 'claimed';
