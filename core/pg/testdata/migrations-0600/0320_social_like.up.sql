-- services/social/like: like counters (spec 40 Part C).
--
-- The truth is social_like, the set of (item, user) facts; the count per
-- item is derived, stored in social_like_count and kept by the outbox
-- consumer social.likes, one +1 or -1 per social.like event. The count may
-- lag the facts; by how much is computed by social_like_unapplied below
-- and served with every count (LIKE-I4).

-- One row per (item, user): liked is the current state, version grows by
-- one per change (LIKE-I1). A row starts at version 1, liked, and every
-- change flips it, so a row is liked exactly when its version is odd: the
-- CHECK says so. changed_tx is the transaction of the last change, the one
-- that appended the change's event (LIKE-I2 finds it there).
--
-- Items are social_post ids. There is deliberately no foreign key to
-- social_post: the check would take a KEY SHARE lock on the post row in
-- every like, so every liker of a hot post would share one row lock (a
-- new multixact per locker) and queue behind any visibility change. Posts
-- are never deleted, and the service checks the post in the like's own
-- transaction (AccessCheck).
CREATE TABLE social_like (
    item_id    bigint      NOT NULL CHECK (item_id > 0),
    user_id    text        NOT NULL CHECK (user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
    liked      boolean     NOT NULL DEFAULT true,
    version    bigint      NOT NULL DEFAULT 1,
    changed_tx xid8        NOT NULL DEFAULT pg_current_xact_id(),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (item_id, user_id),
    CONSTRAINT social_like_versioned CHECK (version >= 1 AND liked = (version % 2 = 1))
);

-- A fact is never deleted and never rewritten in place: a deleted row
-- would restart at version 1, and its like, already counted, would have
-- no unlike event to take it back (LIKE-I2, LIKE-I3). Every update is one
-- change: liked flips and version grows by exactly one (LIKE-I1). The
-- service's conditional statements are the second line; this is the first.
CREATE FUNCTION social_like_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'social_like rows are never deleted (item %, user %)', OLD.item_id, OLD.user_id;
    END IF;
    IF NEW.item_id <> OLD.item_id OR NEW.user_id <> OLD.user_id THEN
        RAISE EXCEPTION 'social_like keys never change';
    END IF;
    IF NEW.version <> OLD.version + 1 OR NEW.liked = OLD.liked THEN
        RAISE EXCEPTION 'social_like item % user %: a change flips liked and adds one to version (% v% -> % v%)',
            OLD.item_id, OLD.user_id, OLD.liked, OLD.version, NEW.liked, NEW.version;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER social_like_guard BEFORE UPDATE OR DELETE ON social_like
    FOR EACH ROW EXECUTE FUNCTION social_like_guard();

-- The derived count per item. n is the sum of the +1/-1 of every event
-- applied to it. counted_through is the snapshot of the last recompute:
-- the recount included exactly the events whose transaction is visible in
-- it, so the consumer skips those and applies the rest (LIKE-04). n has no
-- CHECK (n >= 0) on purpose: a CHECK that failed would stop the consumer
-- at that batch for good, and a transient dip is within LIKE-I4's bound.
CREATE TABLE social_like_count (
    item_id         bigint      PRIMARY KEY,
    n               bigint      NOT NULL,
    counted_through pg_snapshot,
    recomputed_at   timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- An item's like events in the order the consumer reads them, so the
-- unapplied events of one item are an index range, not a scan of the lag.
CREATE INDEX outbox_event_social_like ON outbox_event (key, tx_id, id) WHERE topic = 'social.like';

-- social_like_unapplied(item): the item's like events its count does not
-- include yet, with the sum of their +1/-1 and the oldest one's time. An
-- event is in the count once the consumer has applied it — its inbox row
-- commits with the increment — or once a recompute counted it — its
-- transaction is visible in counted_through. Each of the others moves the
-- count by one, so abs(count - truth) <= events (LIKE-I4), and once there
-- are none the count is the truth (LIKE-I3). Everything at or before the
-- consumer's position is in its inbox (OUTBOX-I2), so only the events
-- after it are looked at; after a reset of the position (a replay) the
-- inbox keeps the answer exact. A consumer that never ran has applied
-- nothing. Read it in the same statement as the count.
CREATE FUNCTION social_like_unapplied(bigint) RETURNS TABLE (events bigint, delta bigint, oldest timestamptz)
LANGUAGE sql STABLE AS $$
SELECT count(*), coalesce(sum(CASE WHEN (e.payload->>'liked')::boolean THEN 1 ELSE -1 END), 0), min(e.created_at)
  FROM outbox_event e
  LEFT JOIN social_like_count c ON c.item_id = $1
 WHERE e.topic = 'social.like' AND e.key = $1::text
   -- The position as two scalars, so the index range starts at it.
   AND (e.tx_id, e.id) > (coalesce((SELECT position_tx FROM outbox_consumer WHERE name = 'social.likes'), '0'::xid8),
                          coalesce((SELECT position_id FROM outbox_consumer WHERE name = 'social.likes'), 0))
   AND (c.counted_through IS NULL OR NOT pg_visible_in_snapshot(e.tx_id, c.counted_through))
   -- OFFSET 0 keeps this a probe of the inbox's key per event: as a join,
   -- the planner may hash the whole inbox to check a handful of events.
   AND NOT EXISTS (SELECT 1 FROM outbox_inbox i WHERE i.consumer = 'social.likes' AND i.event_id = e.id OFFSET 0)
$$;
