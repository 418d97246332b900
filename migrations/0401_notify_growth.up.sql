-- Notifications, bounded growth (docs/DATA.md): a notification is purged
-- with everything under it (its tasks, their attempts and review
-- decisions, and their claim jobs with their history) once every task has
-- finished and both it and its last task are older than
-- FENCELAB_NOTIFY_RETENTION, by the notify.purge kind, oldest first from
-- this index. The retention is also the dedupe window of NTF-I1: the same
-- (user, event) submitted after its notification is gone is a new one.
CREATE INDEX IF NOT EXISTS notify_notification_created ON notify_notification (created_at, id);

-- NTF-I3: attempts and decisions are append-only — a row is never
-- rewritten, and never deleted except by the retention purge, which
-- deletes a whole notification at once (no gap in a task's attempt
-- numbers) and says so for its own transaction with
-- set_config('fencelab.notify_purge', 'on', true). TRUNCATE stays refused.
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
