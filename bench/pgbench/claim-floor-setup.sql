-- psql -v jobs=N -f bench/pgbench/claim-floor-setup.sql: the tables the
-- claim floor (bench/pgbench/claim-floor.sql) drains, made anew with N ready
-- jobs. They hold what a fenced claim and completion must write and
-- nothing more: the job with its fence, owner and lease; its finished copy
-- in a history (primary key only, so a finished job can still be found);
-- one event per transition, with no index at all. The engine's tables
-- carry more (CHECKs, the unique claim per fence, the lease index, the
-- business key, the retry schedule): the floor is what is left when all
-- of that is stripped, a yardstick for what the rows alone cost on the
-- server it runs on (bench/claim-vs-river.sh drains it every round).
SET client_min_messages = warning;
DROP TABLE IF EXISTS claim_floor_job, claim_floor_history, claim_floor_event;
CREATE TABLE claim_floor_job (
    id          bigint PRIMARY KEY,
    kind        text NOT NULL DEFAULT 'noop',
    state       text NOT NULL DEFAULT 'ready',
    owner       int,
    fence       bigint NOT NULL DEFAULT 0,
    lease_until timestamptz,
    args        jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- The claim's scan and the completion's look-up, each over its own state.
CREATE INDEX claim_floor_job_ready ON claim_floor_job (id) WHERE state = 'ready';
CREATE INDEX claim_floor_job_running ON claim_floor_job (owner) WHERE state = 'running';
CREATE TABLE claim_floor_history (
    id          bigint PRIMARY KEY,
    kind        text NOT NULL,
    state       text NOT NULL,
    owner       int,
    fence       bigint NOT NULL,
    args        jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE claim_floor_event (
    job_id bigint NOT NULL,
    event  text NOT NULL,
    fence  bigint NOT NULL,
    owner  int,
    at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO claim_floor_job (id) SELECT g FROM generate_series(1, :jobs) AS g;
VACUUM ANALYZE claim_floor_job;
CHECKPOINT;
