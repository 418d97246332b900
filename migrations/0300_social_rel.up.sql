-- services/social/rel: follow relations are authorization (spec 40 Part A).
--
-- The truth is social_relation, one row per ordered pair. Everything else
-- (follower and following lists, their counts, later the feed inbox) is a
-- derived view fed by the outbox topic social.rel and may lag; every read
-- that decides a permission goes to the truth table through the functions
-- at the end of this file.

-- Users exist once they have used the service (their first write creates
-- the row) or set their profile. ids are token subjects.
CREATE TABLE social_user (
    user_id    text        PRIMARY KEY CHECK (user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
    private    boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The relation truth table (REL-I1). One row per ordered pair: the primary
-- key is the first line against duplicate rows, and every operation on a
-- pair locks both of its rows in key order, so racing follows, unfollows
-- and blocks serialise on them. States of (follower, followee):
--   none     no relation (never deleted: a tombstone keeps the version)
--   pending  follower asked to follow the private followee
--   active   follower follows followee: the grant to read FOLLOWERS posts
--   blocked  follower blocks followee (REL-I2: then neither follows the other)
-- version grows by one per change; the change's outbox event carries it
-- and its id is kept in event_id, with the writing transaction in
-- changed_tx (REL-I1 finds the event, or proves it was purged).
CREATE TABLE social_relation (
    follower   text        NOT NULL REFERENCES social_user (user_id),
    followee   text        NOT NULL REFERENCES social_user (user_id),
    state      text        NOT NULL DEFAULT 'none' CHECK (state IN ('none', 'pending', 'active', 'blocked')),
    version    bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    event_id   bigint,
    changed_tx xid8,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (follower, followee),
    CONSTRAINT social_relation_not_self CHECK (follower <> followee),
    -- version 0 is the row as created to be locked: never changed, no event.
    CONSTRAINT social_relation_versioned CHECK ((version = 0) = (event_id IS NULL)
                                                AND (version = 0) = (changed_tx IS NULL)
                                                AND (version > 0 OR state = 'none'))
);

-- Followers and pending requests of a user (truth reads: push fan-out,
-- the requests list, AccessCheck's follower probe goes through the key).
CREATE INDEX social_relation_by_followee ON social_relation (followee, state, follower)
    WHERE state IN ('active', 'pending');
-- Whom a user follows now (the feed's pull side).
CREATE INDEX social_relation_following ON social_relation (follower, followee)
    WHERE state = 'active';

-- A row is never deleted (its version would restart and every view would
-- ignore the pair's new events as old: REL-I3) and its version only grows,
-- by one per change (REL-I1). The service's conditional UPDATE is the
-- second line; this trigger is the first.
CREATE FUNCTION social_relation_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'social_relation rows are never deleted (% > %)', OLD.follower, OLD.followee;
    END IF;
    IF NEW.follower <> OLD.follower OR NEW.followee <> OLD.followee THEN
        RAISE EXCEPTION 'social_relation keys never change';
    END IF;
    IF NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'social_relation % > %: version must grow by one per change (% -> %)',
            OLD.follower, OLD.followee, OLD.version, NEW.version;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER social_relation_guard BEFORE UPDATE OR DELETE ON social_relation
    FOR EACH ROW EXECUTE FUNCTION social_relation_guard();

-- Posts. (created_at, post_id) is the keyset order of timelines and feeds.
-- version grows by one per visibility change (the social.post event
-- carries it).
CREATE TABLE social_post (
    post_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    author     text        NOT NULL REFERENCES social_user (user_id),
    visibility text        NOT NULL CHECK (visibility IN ('PUBLIC', 'FOLLOWERS', 'SELF')),
    body       text        NOT NULL CHECK (length(body) BETWEEN 1 AND 4000),
    version    bigint      NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX social_post_timeline ON social_post (author, created_at DESC, post_id DESC);

-- Derived views, one table per view, maintained by the outbox consumer
-- named in social_view. A row is (user_id, peer_id): in social_followers
-- peer_id follows user_id, in social_following user_id follows peer_id.
-- version is the newest relation version applied (REL-I3: an event is
-- applied only if its version is greater); a row that stops being active
-- stays as a tombstone with its version, so a replayed old "active" event
-- cannot resurrect it.
CREATE TABLE social_followers (
    user_id    text        NOT NULL,
    peer_id    text        NOT NULL,
    active     boolean     NOT NULL,
    version    bigint      NOT NULL CHECK (version >= 1),
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, peer_id)
);

CREATE TABLE social_following (
    user_id    text        NOT NULL,
    peer_id    text        NOT NULL,
    active     boolean     NOT NULL,
    version    bigint      NOT NULL CHECK (version >= 1),
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, peer_id)
);

-- Counts of the active rows of each view per user, written in the same
-- transaction as the view rows (REL-I4 compares them).
CREATE TABLE social_follower_count (
    user_id text   PRIMARY KEY,
    n       bigint NOT NULL CHECK (n >= 0)
);

CREATE TABLE social_following_count (
    user_id text   PRIMARY KEY,
    n       bigint NOT NULL CHECK (n >= 0)
);

-- The derived views and their declared lag (REL-I4): a view may disagree
-- with the truth table only about pairs whose events its consumer has not
-- applied yet, and no unapplied event may be older than max_lag. Later
-- views (the feed inbox) add a row here.
CREATE TABLE social_view (
    name        text     PRIMARY KEY,
    consumer    text     NOT NULL UNIQUE,
    topics      text[]   NOT NULL CHECK (cardinality(topics) >= 1),
    max_lag     interval NOT NULL CHECK (max_lag > interval '0'),
    description text     NOT NULL
);

INSERT INTO social_view (name, consumer, topics, max_lag, description) VALUES
    ('followers', 'social.followers', ARRAY['social.rel'], interval '1 minute', 'follower lists and counts (social_followers, social_follower_count)'),
    ('following', 'social.following', ARRAY['social.rel'], interval '1 minute', 'following lists and counts (social_following, social_following_count)');

-- AccessCheck, set-based: the posts viewer may read now, decided on the
-- truth table. A SQL set-returning function of one SELECT is inlined into
-- the calling query, so
--     SELECT … FROM social_readable_posts($reader) p WHERE p.post_id = ANY ($ids)
-- re-checks a whole feed page in one statement with the planner's joins.
-- The rules: the author reads everything; nobody else reads SELF; a
-- blocked pair (either direction: REL-I2) reads nothing of each other;
-- PUBLIC is for everyone else; FOLLOWERS for active followers.
-- Parameters are positional on purpose: a named one would lose to the
-- column of the same name.
CREATE FUNCTION social_readable_posts(text) RETURNS SETOF social_post
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT p.*
  FROM social_post p
 WHERE p.author = $1
    OR (p.visibility <> 'SELF'
        AND NOT EXISTS (SELECT 1 FROM social_relation b
                         WHERE b.state = 'blocked'
                           AND ((b.follower = $1 AND b.followee = p.author)
                             OR (b.follower = p.author AND b.followee = $1)))
        AND (p.visibility = 'PUBLIC'
             OR EXISTS (SELECT 1 FROM social_relation f
                         WHERE f.follower = $1 AND f.followee = p.author AND f.state = 'active')))
$$;

-- AccessCheck for one post: social_can_read(viewer, post_id).
CREATE FUNCTION social_can_read(text, bigint) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT EXISTS (SELECT 1 FROM social_readable_posts($1) p WHERE p.post_id = $2)
$$;

-- social_blocked(a, b): either of the two blocks the other (REL-I2).
CREATE FUNCTION social_blocked(text, text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT EXISTS (SELECT 1 FROM social_relation
                WHERE state = 'blocked'
                  AND ((follower = $1 AND followee = $2) OR (follower = $2 AND followee = $1)))
$$;

-- social_can_see_lists(viewer, owner): whether viewer may read owner's
-- follower and following lists and counts: the owner; otherwise nobody in
-- a blocked pair; a public account's to everyone else; a private
-- account's to its active followers.
CREATE FUNCTION social_can_see_lists(text, text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT $1 = $2
    OR (NOT social_blocked($1, $2)
        AND EXISTS (SELECT 1 FROM social_user u
                     WHERE u.user_id = $2
                       AND (NOT u.private
                            OR EXISTS (SELECT 1 FROM social_relation f
                                        WHERE f.follower = $1 AND f.followee = $2 AND f.state = 'active'))))
$$;
