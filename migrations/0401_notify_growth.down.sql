CREATE OR REPLACE FUNCTION notify_attempt_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
    RAISE EXCEPTION 'notify_review_decision is append-only (% refused)', TG_OP;
END $$;

DROP INDEX IF EXISTS notify_notification_created;
