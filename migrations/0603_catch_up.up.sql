-- Catch-up (docs/DEVELOPING.md, "Migrations"). golang-migrate applies only
-- versions above a database's current one, and these files were added below
-- the top after databases had passed them: 0021, 0032, 0033, 0311, 0501
-- (added when the top was 0600) and 0312, 0401 (added when it was 0601).
-- A database migrated before they existed never ran them. This file
-- repeats what they create, idempotently, so every database converges to
-- the schema a fresh one gets; on a fresh database
-- (which ran them) every statement here is a no-op or rewrites the same
-- definition. core/pg's TestAnOldDevDatabaseCatchesUp migrates the old
-- sequences, then this one, and compares the schema with a fresh database's.
--
-- A migration added below the top from now on is repeated in a NEW top
-- catch-up file (never by editing this one: databases have applied it).

-- 0021_claim_growth
CREATE INDEX IF NOT EXISTS job_finished_idx ON job (kind, updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX IF NOT EXISTS job_live_idx ON job (kind, state) WHERE state IN ('ready', 'running', 'unknown', 'needs_review');

-- 0032_outbox_topic_indexes (databases past 0320 have it from there)
CREATE INDEX IF NOT EXISTS outbox_event_social_like ON outbox_event (key, tx_id, id) WHERE topic = 'social.like';

-- 0033_outbox_growth
CREATE INDEX IF NOT EXISTS outbox_event_topic_order ON outbox_event (topic, tx_id, id);
DROP INDEX IF EXISTS outbox_event_order;

-- 0311_feed_growth
CREATE INDEX IF NOT EXISTS social_feed_post_pushed ON social_feed_post (author, created_at DESC, post_id DESC) WHERE pushed;

-- 0312_feed_inbox_retention
CREATE INDEX IF NOT EXISTS social_feed_inbox_created ON social_feed_inbox (created_at);
CREATE TABLE IF NOT EXISTS social_feed_inbox_horizon (
    one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
    horizon timestamptz NOT NULL
);

-- 0501_shortlink_growth: the counter table, filled from the rows once, when
-- it is created here (where it exists, the click writer and the purge have
-- kept it: SL-I5).
DO $$
BEGIN
    IF to_regclass('shortlink_click_count') IS NULL THEN
        CREATE TABLE shortlink_click_count (
            code          text   PRIMARY KEY,
            clicks        bigint NOT NULL DEFAULT 0 CHECK (clicks >= 0),
            purged_clicks bigint NOT NULL DEFAULT 0 CHECK (purged_clicks >= 0),
            dropped       bigint NOT NULL DEFAULT 0 CHECK (dropped >= 0),
            purged_drops  bigint NOT NULL DEFAULT 0 CHECK (purged_drops >= 0)
        );
        INSERT INTO shortlink_click_count (code, clicks, dropped)
        SELECT code, sum(c), sum(d)
          FROM (SELECT code, count(*) AS c, 0 AS d FROM shortlink_clicks GROUP BY code
                UNION ALL
                SELECT code, 0, sum(dropped) FROM shortlink_click_drops GROUP BY code) x
         GROUP BY code;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS shortlink_clicks_clicked_at ON shortlink_clicks (clicked_at);
CREATE INDEX IF NOT EXISTS shortlink_click_drops_flushed_at ON shortlink_click_drops (flushed_at);

-- 0401_notify_growth
CREATE INDEX IF NOT EXISTS notify_notification_created ON notify_notification (created_at, id);
CREATE OR REPLACE FUNCTION notify_attempt_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('fencelab.notify_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION 'notify_attempt is append-only (% refused)', TG_OP;
    END IF;
    IF OLD.outcome <> 'pending' THEN
        RAISE EXCEPTION 'notify_attempt %: outcome % is final', OLD.id, OLD.outcome;
    END IF;
    IF NEW.outcome = 'pending'
       OR (NEW.id, NEW.task_id, NEW.attempt_no, NEW.op, NEW.fence, NEW.worker, NEW.key_sent, NEW.started_at)
          IS DISTINCT FROM
          (OLD.id, OLD.task_id, OLD.attempt_no, OLD.op, OLD.fence, OLD.worker, OLD.key_sent, OLD.started_at) THEN
        RAISE EXCEPTION 'notify_attempt %: only the outcome of a pending attempt may be written', OLD.id;
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION notify_review_decision_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('fencelab.notify_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'notify_review_decision is append-only (% refused)', TG_OP;
END $$;
