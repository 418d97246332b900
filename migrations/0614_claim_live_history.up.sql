-- Claim engine: finished jobs leave the table that claims scan (#38).
--
-- `job` keeps the live queue only (ready, running, unknown, needs_review).
-- A job that finishes (succeeded, failed, cancelled) moves, in the same
-- statement as its fenced transition, to job_history: its size, its dead
-- tuples and autovacuum's walks of its indexes no longer grow with the
-- history kept for inspection. With one table for both, every vacuum of
-- the claimed table read every finished job's index entries, and the
-- drains that met it ran at 0.56-0.78x an empty database's speed.
--
-- job_history is partitioned by LIST (kept): kinds whose rows a module
-- points at (KeepFinished) wait in job_history_kept until their owner
-- deletes them; every other finished job lives in job_history_days, one
-- RANGE partition per UTC day of its finish time (updated_at). The engine
-- creates days ahead and drops a day once it is past the retention: the
-- purge of a day costs that day's rows, never the history beside it. The
-- default partition catches a finish on a day not yet created (the
-- engine fell behind); claim.purge deletes its expired rows in batches.
--
-- (kind, business_key) stays unique across job and job_history: the
-- enqueue looks in job_history before it inserts, and the constraint
-- trigger below re-checks after the insert with a fresh snapshot, for
-- the one window the statement's snapshot cannot see (a completion that
-- moved the key's job while the insert waited on its row).
CREATE TABLE job_history (
    id           bigint      NOT NULL,
    kind         text        NOT NULL,
    business_key text        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('succeeded', 'failed', 'cancelled')),
    payload      jsonb       NOT NULL,
    due_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    owner        text,
    fence        bigint      NOT NULL,
    lease_until  timestamptz,
    last_error   text,
    result       jsonb,
    kept         boolean     NOT NULL DEFAULT false
) PARTITION BY LIST (kept);

CREATE TABLE job_history_kept PARTITION OF job_history FOR VALUES IN (true);
CREATE TABLE job_history_days PARTITION OF job_history FOR VALUES IN (false) PARTITION BY RANGE (updated_at);
CREATE TABLE job_history_days_default PARTITION OF job_history_days DEFAULT;

-- A job by id (Get, the stale-write records, modules' joins through
-- job_all) and the enqueue's uniqueness look-up. Two index writes per
-- finished job, against three for the in-place finish it replaces.
CREATE INDEX job_history_id ON job_history (id);
CREATE INDEX job_history_key ON job_history (kind, business_key);
-- The default partition's batched purge (normally empty).
CREATE INDEX job_history_days_default_finished ON job_history_days_default (updated_at);

-- Every job, live or finished: what readers of a job by id or by state use.
CREATE VIEW job_all AS
SELECT id, kind, business_key, state, payload, due_at, created_at, updated_at,
       attempts, max_attempts, owner, fence, lease_until, last_error, result
  FROM job
UNION ALL
SELECT id, kind, business_key, state, payload, due_at, created_at, updated_at,
       attempts, max_attempts, owner, fence, lease_until, last_error, result
  FROM job_history;

CREATE FUNCTION job_key_unique_across_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- VOLATILE: this query takes its own snapshot, so it sees a move that
    -- committed while the inserting statement waited.
    IF EXISTS (SELECT 1 FROM job_history WHERE kind = NEW.kind AND business_key = NEW.business_key) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "job_kind_business_key_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'job_kind_business_key_key',
                  DETAIL = format('Key (kind, business_key)=(%s, %s) belongs to a finished job.', NEW.kind, NEW.business_key);
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER job_key_unique_across_history AFTER INSERT ON job
    FOR EACH ROW EXECUTE FUNCTION job_key_unique_across_history();

-- The days around the migration; the engine keeps creating them ahead.
DO $$
DECLARE d date;
BEGIN
    FOR i IN 0..7 LOOP
        d := (now() AT TIME ZONE 'UTC')::date + i;
        EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF job_history_days FOR VALUES FROM (%L) TO (%L)',
                       'job_history_d' || to_char(d, 'YYYYMMDD'), d::text || ' 00:00:00+00', (d + 1)::text || ' 00:00:00+00');
    END LOOP;
END $$;

-- Finished jobs already in job move to the history (today's partition, or
-- the default one for earlier days, which claim.purge empties in batches).
WITH moved AS (
    DELETE FROM job WHERE state IN ('succeeded', 'failed', 'cancelled')
    RETURNING id, kind, business_key, state, payload, due_at, created_at, updated_at,
              attempts, max_attempts, owner, fence, lease_until, last_error, result
)
INSERT INTO job_history (id, kind, business_key, state, payload, due_at, created_at, updated_at,
                         attempts, max_attempts, owner, fence, lease_until, last_error, result)
SELECT * FROM moved;
