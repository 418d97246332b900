-- Notifications (spec 50, "Notifications"; the book's notification chapter).
-- A business submits an event; the service keeps one logical notification
-- per (user, event) and one delivery task per enabled channel. Each task is
-- driven by one claim-engine job (core/claim): the job is the task's state
-- machine and token; this schema holds the identities, the append-only
-- record of every channel call, and the people's decisions on tasks whose
-- outcome no machine could establish.

-- A user is known to the notification service once their channel
-- preferences are stored (PUT /notify/users/{id}/preferences, or the dev
-- seed); an event for anyone else is refused with 404.
CREATE TABLE notify_user (
    user_id    text        PRIMARY KEY CHECK (user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notify_preference (
    user_id    text        NOT NULL REFERENCES notify_user ON DELETE CASCADE,
    channel    text        NOT NULL CHECK (channel IN ('email', 'sms', 'push')),
    enabled    boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL,
    PRIMARY KEY (user_id, channel)
);

CREATE TABLE notify_notification (
    id           bigserial   PRIMARY KEY,
    user_id      text        NOT NULL REFERENCES notify_user,
    event_key    text        NOT NULL CHECK (event_key ~ '^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$'),
    template     text        NOT NULL CHECK (template ~ '^[a-z][a-z0-9_.-]{0,99}$'),
    data         jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(data) = 'object'),
    submitted_by text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- NTF-I1, first line: however many submissions, however concurrent.
    CONSTRAINT notify_notification_one_per_event UNIQUE (user_id, event_key)
);

CREATE TABLE notify_task (
    id              bigserial   PRIMARY KEY,
    notification_id bigint      NOT NULL REFERENCES notify_notification,
    channel         text        NOT NULL CHECK (channel IN ('email', 'sms', 'push')),
    -- What every call for this task carries (Idempotency-Key where the
    -- channel honours one, and always the message reference the channel's
    -- lookup answers by). Derived from the notification and the channel,
    -- never from an attempt (NTF-I4); generated, so it cannot drift.
    delivery_key    text        NOT NULL GENERATED ALWAYS AS
                        ('notify-' || notification_id::text || '-' || channel) STORED,
    -- The claim job (kind notify.<channel>, business key = delivery_key)
    -- whose state, fence and lease are the task's. No foreign key into the
    -- engine's table; NTF-I2 checks the pairing.
    job_id          bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- NTF-I2, first line: at most one task per (notification, channel),
    -- one job per task.
    CONSTRAINT notify_task_one_per_channel UNIQUE (notification_id, channel),
    CONSTRAINT notify_task_one_job UNIQUE (job_id),
    CONSTRAINT notify_task_delivery_key UNIQUE (delivery_key)
);

-- NTF-I3: one row per call to a channel — a send, or a lookup — written
-- before the call goes out (outcome 'pending') under the caller's fence,
-- and given its outcome exactly once when the call returns. A pending row
-- is a call whose caller stopped before it could say (crashed, or stalled
-- past its lease); an 'unknown' row is a call that got no answer. Neither is
-- ever rewritten by a later attempt's result: later results are new rows.
CREATE TABLE notify_attempt (
    id          bigserial   PRIMARY KEY,
    task_id     bigint      NOT NULL REFERENCES notify_task,
    attempt_no  integer     NOT NULL CHECK (attempt_no >= 1),
    op          text        NOT NULL CHECK (op IN ('send', 'query')),
    -- The token the caller held: a claim's fence for a send, the
    -- resolver's fence for a query.
    fence       bigint      NOT NULL CHECK (fence >= 1),
    worker      text        NOT NULL,
    key_sent    text        NOT NULL,
    outcome     text        NOT NULL DEFAULT 'pending'
                            CHECK (outcome IN ('pending', 'success', 'failed', 'unknown')),
    -- The channel's id of the effect: the one a send created, or the one a
    -- query found (NULL on a successful query: authoritatively absent).
    effect_id   text,
    detail      text        CHECK (char_length(detail) <= 2000),
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    CONSTRAINT notify_attempt_number UNIQUE (task_id, attempt_no),
    CONSTRAINT notify_attempt_finished CHECK ((outcome = 'pending') = (finished_at IS NULL)),
    CONSTRAINT notify_attempt_timing CHECK (finished_at IS NULL OR finished_at >= started_at)
);

-- NTF-I3, first line: a row is inserted pending, its outcome set once, and
-- nothing else about it ever changes; no row is deleted.
CREATE FUNCTION notify_attempt_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER notify_attempt_append_only BEFORE UPDATE OR DELETE ON notify_attempt
    FOR EACH ROW EXECUTE FUNCTION notify_attempt_append_only();
CREATE TRIGGER notify_attempt_no_truncate BEFORE TRUNCATE ON notify_attempt
    FOR EACH STATEMENT EXECUTE FUNCTION notify_attempt_append_only();

-- A person's decision on a task in needs_review, with who (the verified
-- token's subject) and why. Written in the transaction that applies it to
-- the task's job (claim.DecideTx), append-only like the attempts.
CREATE TABLE notify_review_decision (
    id         bigserial   PRIMARY KEY,
    task_id    bigint      NOT NULL REFERENCES notify_task,
    action     text        NOT NULL CHECK (action IN ('delivered', 'resend', 'give_up')),
    decided_by text        NOT NULL,
    reason     text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 1000),
    job_fence  bigint      NOT NULL,
    decided_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notify_review_decision_task ON notify_review_decision (task_id);

CREATE FUNCTION notify_review_decision_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'notify_review_decision is append-only (% refused)', TG_OP;
END $$;
CREATE TRIGGER notify_review_decision_append_only BEFORE UPDATE OR DELETE ON notify_review_decision
    FOR EACH ROW EXECUTE FUNCTION notify_review_decision_append_only();
