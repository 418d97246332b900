-- Short links (spec 50, "Short links"; the book's short-link chapter).

-- SL-I1: the primary key is the first line of "a code maps to at most one
-- target"; shortlink_links_guard below makes every fact fixed at creation
-- immutable and refuses deletion, so a code is never overwritten or re-used.
CREATE TABLE shortlink_links (
    code        text        PRIMARY KEY,
    target      text        NOT NULL,
    owner       text        NOT NULL,
    custom      boolean     NOT NULL,  -- an alias chosen by the owner, not a random code
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,           -- fixed at creation; NULL: never expires
    revoked_at  timestamptz,           -- NULL while live; set once, by revoke
    CONSTRAINT shortlink_links_code_format CHECK (code ~ '^[A-Za-z0-9_-]{3,64}$'),
    CONSTRAINT shortlink_links_target_length CHECK (length(target) BETWEEN 1 AND 2048),
    CONSTRAINT shortlink_links_expiry_after_creation CHECK (expires_at IS NULL OR expires_at > created_at),
    CONSTRAINT shortlink_links_revocation_after_creation CHECK (revoked_at IS NULL OR revoked_at >= created_at)
);

CREATE FUNCTION shortlink_links_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'shortlink: link % cannot be deleted: a code is never re-used (SL-I1)', OLD.code;
    END IF;
    IF (NEW.code, NEW.target, NEW.owner, NEW.custom, NEW.created_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.code, OLD.target, OLD.owner, OLD.custom, OLD.created_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'shortlink: link % is immutable apart from its revocation (SL-I1)', OLD.code;
    END IF;
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'shortlink: link % is revoked; revocation is final', OLD.code;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER shortlink_links_guard BEFORE UPDATE OR DELETE ON shortlink_links
    FOR EACH ROW EXECUTE FUNCTION shortlink_links_guard();

-- SL-I1's evidence: one row per caller that was told "created", written by
-- the statement that inserted the link, never updated or deleted. The
-- invariant compares it with shortlink_links.
CREATE TABLE shortlink_creations (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code        text        NOT NULL,
    target      text        NOT NULL,
    owner       text        NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX shortlink_creations_code ON shortlink_creations (code);

CREATE FUNCTION shortlink_creations_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'shortlink: shortlink_creations is append-only (SL-I1)';
END
$$;

CREATE TRIGGER shortlink_creations_append_only BEFORE UPDATE OR DELETE ON shortlink_creations
    FOR EACH ROW EXECUTE FUNCTION shortlink_creations_append_only();

-- Clicks are written in batches by a writer with its own pool (SL-I3). The
-- id is assigned once per click before the first attempt, so a batch retried
-- after a commit whose reply was lost inserts nothing new (SL-I4: the
-- primary key and ON CONFLICT DO NOTHING). No foreign key to shortlink_links:
-- the stats side must not depend on, or lock, the rows the redirect reads.
CREATE TABLE shortlink_clicks (
    id          uuid        PRIMARY KEY,
    code        text        NOT NULL,
    clicked_at  timestamptz NOT NULL
);
CREATE INDEX shortlink_clicks_code ON shortlink_clicks (code);

-- SL-I4: clicks the process had to drop (queue full, stats store failing),
-- counted per link. One row per (flush, code); a flush retried after a lost
-- reply reuses its flush_id, so a drop is counted once.
CREATE TABLE shortlink_click_drops (
    flush_id    uuid        NOT NULL,
    code        text        NOT NULL,
    dropped     bigint      NOT NULL CHECK (dropped > 0),
    flushed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flush_id, code)
);
CREATE INDEX shortlink_click_drops_code ON shortlink_click_drops (code);
