-- Flash sale, part A: reservations (spec 30 Part A; the book's reservation
-- chapter). Part B (orders, 0210..) reuses these tables through
-- services/flashsale/reserve.Inventory and never writes them directly.

-- One row per SKU on sale. FS-R1's first line is the CHECK: whatever the
-- code does, available stays within 0..total, so no statement can sell a
-- unit that does not exist.
CREATE TABLE flashsale_sku (
    sku         text        PRIMARY KEY,
    total       integer     NOT NULL,
    available   integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT flashsale_sku_format CHECK (sku ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    CONSTRAINT flashsale_sku_total CHECK (total >= 0),
    CONSTRAINT flashsale_sku_available CHECK (available >= 0 AND available <= total)
);

-- A reservation holds one unit of one SKU for one user until it is
-- confirmed (paid) or released (expired, cancelled). A released hold whose
-- payment arrives late may take a unit again (retaken_at; part B, ORD-O4).
CREATE TABLE flashsale_reservation (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku           text        NOT NULL REFERENCES flashsale_sku (sku),
    user_id       text        NOT NULL,
    request_key   text        NOT NULL,
    state         text        NOT NULL DEFAULT 'HELD',
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    confirmed_at  timestamptz,
    released_at   timestamptz,
    retaken_at    timestamptz,
    -- FS-R2: one request key makes at most one reservation, whoever sends it.
    CONSTRAINT flashsale_reservation_request_key UNIQUE (request_key),
    CONSTRAINT flashsale_reservation_request_key_length CHECK (length(request_key) BETWEEN 1 AND 255),
    CONSTRAINT flashsale_reservation_user_length CHECK (length(user_id) BETWEEN 1 AND 128),
    CONSTRAINT flashsale_reservation_state CHECK (state IN ('HELD', 'CONFIRMED', 'RELEASED')),
    -- The timestamps say how the reservation got to its state.
    CONSTRAINT flashsale_reservation_stamps CHECK (CASE state
        WHEN 'HELD'      THEN confirmed_at IS NULL AND released_at IS NULL AND retaken_at IS NULL
        WHEN 'RELEASED'  THEN confirmed_at IS NULL AND released_at IS NOT NULL AND retaken_at IS NULL
        WHEN 'CONFIRMED' THEN confirmed_at IS NOT NULL AND (released_at IS NULL) = (retaken_at IS NULL)
    END)
);

-- FS-R3: one active (HELD or CONFIRMED) reservation per user and SKU. Two
-- concurrent holds of one user cannot both commit, whatever their keys.
CREATE UNIQUE INDEX flashsale_reservation_one_active
    ON flashsale_reservation (user_id, sku) WHERE state IN ('HELD', 'CONFIRMED');
-- Stock reads count the active reservations of a SKU (at most its total).
CREATE INDEX flashsale_reservation_active_by_sku
    ON flashsale_reservation (sku, state) WHERE state IN ('HELD', 'CONFIRMED');
-- The release job's scan: HELD reservations by expiry.
CREATE INDEX flashsale_reservation_due
    ON flashsale_reservation (sku, expires_at) WHERE state = 'HELD';

-- The state machine, enforced by the database so that no caller (part B
-- included) can move a reservation another way: HELD → CONFIRMED,
-- HELD → RELEASED, RELEASED → CONFIRMED (a late payment retaking a unit).
-- A reservation's identity never changes, released_at is set once (FS-R5)
-- and rows are never deleted.
CREATE FUNCTION flashsale_reservation_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'flashsale: reservation % cannot be deleted', OLD.id;
    END IF;
    IF (NEW.id, NEW.sku, NEW.user_id, NEW.request_key, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.sku, OLD.user_id, OLD.request_key, OLD.created_at) THEN
        RAISE EXCEPTION 'flashsale: reservation % is immutable apart from its state', OLD.id;
    END IF;
    IF OLD.released_at IS NOT NULL AND NEW.released_at IS DISTINCT FROM OLD.released_at THEN
        RAISE EXCEPTION 'flashsale: reservation % was released at %; a unit is returned once (FS-R5)', OLD.id, OLD.released_at;
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN
       (('HELD', 'CONFIRMED'), ('HELD', 'RELEASED'), ('RELEASED', 'CONFIRMED')) THEN
        RAISE EXCEPTION 'flashsale: reservation % cannot move from % to %', OLD.id, OLD.state, NEW.state;
    END IF;
    IF OLD.state = 'CONFIRMED' AND NEW IS DISTINCT FROM OLD THEN
        RAISE EXCEPTION 'flashsale: reservation % is confirmed; it is final', OLD.id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER flashsale_reservation_guard BEFORE UPDATE OR DELETE ON flashsale_reservation
    FOR EACH ROW EXECUTE FUNCTION flashsale_reservation_guard();

-- FS-R5's evidence: every change of a SKU's available count, one row per
-- unit, written by the statement that changes the count. A reservation's
-- unit is taken once ('hold'), returned at most once ('release') and taken
-- again at most once ('retake'): the unique key refuses a second return
-- even if a caller's state check were wrong. available = total + Σ delta.
CREATE TABLE flashsale_stock_move (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku             text        NOT NULL REFERENCES flashsale_sku (sku),
    reservation_id  bigint      NOT NULL REFERENCES flashsale_reservation (id),
    reason          text        NOT NULL,
    delta           smallint    NOT NULL,
    moved_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT flashsale_stock_move_reason CHECK (
        (reason = 'hold' AND delta = -1) OR (reason = 'release' AND delta = 1) OR (reason = 'retake' AND delta = -1)),
    CONSTRAINT flashsale_stock_move_once UNIQUE (reservation_id, reason)
);

CREATE FUNCTION flashsale_stock_move_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'flashsale: flashsale_stock_move is append-only (FS-R5)';
END
$$;

CREATE TRIGGER flashsale_stock_move_append_only BEFORE UPDATE OR DELETE ON flashsale_stock_move
    FOR EACH ROW EXECUTE FUNCTION flashsale_stock_move_append_only();
