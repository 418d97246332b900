-- Flash sale, part B: orders and an uncertain payment channel (spec 30
-- Part B; the book's order/payment chapter). Orders sit on part A's
-- reservations and change them only through reserve.Inventory (confirm,
-- retake, release); this migration never touches part A's tables.

-- ORD-O1's first line: the order state machine as data. A move not listed
-- here is refused by the guard trigger whatever the code does.
--
--   CREATED → PAYING → PAID                       the happy path
--   CREATED → CLOSED                              the hold ended before payment started
--   PAYING  → FAILED                              the channel definitely refused the charge
--   PAYING  → CLOSED                              the channel has no charge, or it was closed unpaid
--   PAYING | FAILED | CLOSED → PAID_LATE          money arrived after the hold was given up (ORD-O4)
--   PAID_LATE → CONFIRMED_LATE                    a unit was free: retaken, confirmed
--   PAID_LATE → REFUNDING → REFUNDED              no unit: the money goes back, once
CREATE TABLE flashsale_order_move (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);

INSERT INTO flashsale_order_move (from_state, to_state) VALUES
    ('CREATED',   'PAYING'),
    ('CREATED',   'CLOSED'),
    ('PAYING',    'PAID'),
    ('PAYING',    'FAILED'),
    ('PAYING',    'CLOSED'),
    ('PAYING',    'PAID_LATE'),
    ('FAILED',    'PAID_LATE'),
    ('CLOSED',    'PAID_LATE'),
    ('PAID_LATE', 'CONFIRMED_LATE'),
    ('PAID_LATE', 'REFUNDING'),
    ('REFUNDING', 'REFUNDED');

CREATE FUNCTION flashsale_order_move_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'flashsale: the order state machine is fixed by migration (ORD-O1)';
END
$$;

CREATE TRIGGER flashsale_order_move_fixed BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON flashsale_order_move
    FOR EACH STATEMENT EXECUTE FUNCTION flashsale_order_move_fixed();

-- One order per reservation (the constraint behind an idempotent create).
-- pay_ref is the merchant reference the channel knows the order by; the
-- charge and the refund are sent with keys derived from it, so every
-- retry, by any process, asks for the same charge and the same refund.
-- It is random rather than derived from id so that a database rebuilt
-- against the same channel never reuses a reference.
--
-- Money columns hold what the channel reported (the payment event named
-- by charge_event_id / refund_event_id), never what we asked for.
CREATE TABLE flashsale_order (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reservation_id   bigint      NOT NULL REFERENCES flashsale_reservation (id),
    user_id          text        NOT NULL,
    sku              text        NOT NULL REFERENCES flashsale_sku (sku),
    amount           bigint      NOT NULL,
    state            text        NOT NULL DEFAULT 'CREATED',
    pay_ref          text        NOT NULL DEFAULT 'fso_' || replace(gen_random_uuid()::text, '-', ''),
    effect_id        text,
    charged          bigint      NOT NULL DEFAULT 0,
    refunded         bigint      NOT NULL DEFAULT 0,
    charge_event_id  bigint,
    refund_event_id  bigint,
    paid_outbox_id   bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    paying_since     timestamptz,
    CONSTRAINT flashsale_order_one_per_reservation UNIQUE (reservation_id),
    CONSTRAINT flashsale_order_pay_ref UNIQUE (pay_ref),
    CONSTRAINT flashsale_order_effect UNIQUE (effect_id),
    CONSTRAINT flashsale_order_amount CHECK (amount > 0),
    CONSTRAINT flashsale_order_user_length CHECK (length(user_id) BETWEEN 1 AND 128),
    CONSTRAINT flashsale_order_state CHECK (state IN
        ('CREATED', 'PAYING', 'PAID', 'FAILED', 'CLOSED', 'PAID_LATE', 'CONFIRMED_LATE', 'REFUNDING', 'REFUNDED')),
    -- The money each state may hold (the ORD-M1 equation, row by row): no
    -- money before a reported success; exactly the amount while a unit is
    -- confirmed or a refund is owed; nothing kept once refunded.
    CONSTRAINT flashsale_order_money CHECK (CASE
        WHEN state IN ('CREATED', 'PAYING', 'FAILED', 'CLOSED') THEN
             charged = 0 AND refunded = 0 AND charge_event_id IS NULL AND refund_event_id IS NULL AND paid_outbox_id IS NULL
        WHEN state IN ('PAID', 'CONFIRMED_LATE') THEN
             charged = amount AND refunded = 0 AND charge_event_id IS NOT NULL AND refund_event_id IS NULL
             AND paid_outbox_id IS NOT NULL AND effect_id IS NOT NULL
        WHEN state IN ('PAID_LATE', 'REFUNDING') THEN
             charged = amount AND refunded = 0 AND charge_event_id IS NOT NULL AND refund_event_id IS NULL
             AND paid_outbox_id IS NULL AND effect_id IS NOT NULL
        WHEN state = 'REFUNDED' THEN
             charged = amount AND refunded = amount AND charge_event_id IS NOT NULL AND refund_event_id IS NOT NULL
             AND paid_outbox_id IS NULL AND effect_id IS NOT NULL
    END),
    CONSTRAINT flashsale_order_paying_since CHECK (state NOT IN ('PAYING', 'PAID', 'FAILED') OR paying_since IS NOT NULL)
);

-- Reconciliation's scans: orders waiting on the channel, oldest first.
CREATE INDEX flashsale_order_paying ON flashsale_order (paying_since) WHERE state = 'PAYING';
CREATE INDEX flashsale_order_refunding ON flashsale_order (updated_at) WHERE state = 'REFUNDING';
CREATE INDEX flashsale_order_user ON flashsale_order (user_id, id);

-- Everything the channel told us about an order, one row per report: a
-- signed callback (the inbox, keyed by the channel's event id: a
-- redelivery finds its row and changes nothing but the delivery count), or
-- the answer to one of our calls (charge, query, close, refund). A call
-- without an answer is recorded too, as status 'unknown': ORD-O2 checks
-- that no order gave its unit up on one.
CREATE TABLE flashsale_payment_event (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id           bigint      NOT NULL REFERENCES flashsale_order (id),
    source             text        NOT NULL,
    provider_event_id  text,
    event_type         text,
    effect_id          text,
    status             text        NOT NULL,
    amount             bigint,
    refunded           bigint,
    detail             text,
    body_sha256        bytea,
    signed_at          timestamptz,
    verified_at        timestamptz,
    window_seconds     integer,
    deliveries         integer     NOT NULL DEFAULT 1,
    received_at        timestamptz NOT NULL DEFAULT now(),
    last_delivered_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT flashsale_payment_event_inbox UNIQUE (provider_event_id),
    CONSTRAINT flashsale_payment_event_source CHECK (source IN ('callback', 'charge', 'query', 'close', 'refund')),
    CONSTRAINT flashsale_payment_event_status CHECK (status IN
        ('pending', 'succeeded', 'failed', 'closed', 'refunded', 'none', 'rejected', 'unavailable', 'unknown')),
    -- ORD-O5's record: a callback is stored only once its HMAC and
    -- timestamp verified, and says so; nothing else has an event id.
    CONSTRAINT flashsale_payment_event_signed CHECK (CASE WHEN source = 'callback' THEN
             provider_event_id IS NOT NULL AND event_type IS NOT NULL AND body_sha256 IS NOT NULL
             AND signed_at IS NOT NULL AND verified_at IS NOT NULL AND window_seconds > 0
             AND verified_at BETWEEN signed_at - make_interval(secs => window_seconds)
                                 AND signed_at + make_interval(secs => window_seconds)
        ELSE provider_event_id IS NULL AND body_sha256 IS NULL AND signed_at IS NULL AND verified_at IS NULL
        END),
    CONSTRAINT flashsale_payment_event_money CHECK (amount IS NULL OR amount >= 0),
    CONSTRAINT flashsale_payment_event_refund CHECK (refunded IS NULL OR refunded >= 0),
    CONSTRAINT flashsale_payment_event_deliveries CHECK (deliveries >= 1)
);

CREATE INDEX flashsale_payment_event_order ON flashsale_payment_event (order_id, id);

ALTER TABLE flashsale_order
    ADD CONSTRAINT flashsale_order_charge_event FOREIGN KEY (charge_event_id) REFERENCES flashsale_payment_event (id),
    ADD CONSTRAINT flashsale_order_refund_event FOREIGN KEY (refund_event_id) REFERENCES flashsale_payment_event (id);

-- A report is evidence: only a redelivery's count may change.
CREATE FUNCTION flashsale_payment_event_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'flashsale: payment event % cannot be deleted', OLD.id;
    END IF;
    IF (NEW.id, NEW.order_id, NEW.source, NEW.provider_event_id, NEW.event_type, NEW.effect_id, NEW.status,
        NEW.amount, NEW.refunded, NEW.detail, NEW.body_sha256, NEW.signed_at, NEW.verified_at,
        NEW.window_seconds, NEW.received_at)
       IS DISTINCT FROM
       (OLD.id, OLD.order_id, OLD.source, OLD.provider_event_id, OLD.event_type, OLD.effect_id, OLD.status,
        OLD.amount, OLD.refunded, OLD.detail, OLD.body_sha256, OLD.signed_at, OLD.verified_at,
        OLD.window_seconds, OLD.received_at)
       OR NEW.deliveries < OLD.deliveries THEN
        RAISE EXCEPTION 'flashsale: payment event % is evidence; only its delivery count may grow', OLD.id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER flashsale_payment_event_guard BEFORE UPDATE OR DELETE ON flashsale_payment_event
    FOR EACH ROW EXECUTE FUNCTION flashsale_payment_event_guard();

-- Every attempted move, applied or refused (ORD-O1): a refused move is a
-- row with applied = false and the state it found, and nothing else
-- changed. unit is the inventory change committed with the move.
CREATE TABLE flashsale_order_transition (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     bigint      NOT NULL REFERENCES flashsale_order (id),
    from_state   text        NOT NULL,
    to_state     text        NOT NULL,
    applied      boolean     NOT NULL,
    found_state  text        NOT NULL,
    unit         text,
    cause        text        NOT NULL,
    event_id     bigint      REFERENCES flashsale_payment_event (id),
    at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT flashsale_order_transition_refusal CHECK (applied = (found_state = from_state)),
    CONSTRAINT flashsale_order_transition_unit CHECK (unit IS NULL OR (applied AND unit IN ('confirm', 'retake', 'release'))),
    CONSTRAINT flashsale_order_transition_cause CHECK (length(cause) BETWEEN 1 AND 200)
);

CREATE INDEX flashsale_order_transition_order ON flashsale_order_transition (order_id, id);

CREATE FUNCTION flashsale_order_transition_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'flashsale: flashsale_order_transition is append-only (ORD-O1)';
END
$$;

CREATE TRIGGER flashsale_order_transition_append_only BEFORE UPDATE OR DELETE ON flashsale_order_transition
    FOR EACH ROW EXECUTE FUNCTION flashsale_order_transition_append_only();

-- The order guard (ORD-O1): an order's identity never changes, its state
-- changes only along flashsale_order_move, money and evidence change only
-- with a move, the channel's effect id is written once, and no order is
-- deleted.
CREATE FUNCTION flashsale_order_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'flashsale: order % cannot be deleted', OLD.id;
    END IF;
    IF (NEW.id, NEW.reservation_id, NEW.user_id, NEW.sku, NEW.amount, NEW.pay_ref, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.reservation_id, OLD.user_id, OLD.sku, OLD.amount, OLD.pay_ref, OLD.created_at) THEN
        RAISE EXCEPTION 'flashsale: order % is immutable apart from its state', OLD.id;
    END IF;
    IF OLD.effect_id IS NOT NULL AND NEW.effect_id IS DISTINCT FROM OLD.effect_id THEN
        RAISE EXCEPTION 'flashsale: order % is paid through effect %; it cannot change', OLD.id, OLD.effect_id;
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        IF NOT EXISTS (SELECT 1 FROM flashsale_order_move m WHERE m.from_state = OLD.state AND m.to_state = NEW.state) THEN
            RAISE EXCEPTION 'flashsale: order % cannot move from % to % (ORD-O1)', OLD.id, OLD.state, NEW.state;
        END IF;
    ELSIF (NEW.charged, NEW.refunded, NEW.charge_event_id, NEW.refund_event_id, NEW.paid_outbox_id, NEW.paying_since)
          IS DISTINCT FROM (OLD.charged, OLD.refunded, OLD.charge_event_id, OLD.refund_event_id, OLD.paid_outbox_id, OLD.paying_since) THEN
        RAISE EXCEPTION 'flashsale: order % money and evidence change only with a move', OLD.id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER flashsale_order_guard BEFORE UPDATE OR DELETE ON flashsale_order
    FOR EACH ROW EXECUTE FUNCTION flashsale_order_guard();
