-- services/social/feed: the home feed by push, pull and hybrid (spec 40
-- Part B). Everything here is derived from rel's truth (social_post,
-- social_relation) by one outbox consumer, social.feed.fanout, and may lag
-- it by the bound declared in social_view. No table here decides a
-- permission: every feed read re-checks social_readable_posts and the
-- follow in the same statement (FEED-I1).

-- The settle order. A post enters feeds when the fan-out consumer settles
-- it; seq is taken inside the consumer's batch, and batches of one
-- consumer never overlap (the consumer row is locked for the batch; the
-- seed loader holds it with outbox.LockPosition), so the settled posts
-- visible to any snapshot are exactly those with seq <= the largest seq it
-- sees. A cursor carries that watermark: the next page returns the posts
-- settled since, inside the range already scrolled, as late arrivals
-- (FEED-03: no skips of older posts that commit late).
CREATE SEQUENCE social_feed_seq AS bigint;

-- One row per settled post: its keyset position (copied from social_post),
-- its settle seq, and the fan-out decision taken when it settled: pushed
-- (into its author's followers' inboxes) or left to be pulled at read
-- time. The decision is recorded so that hybrid reads take each post from
-- exactly one place, whatever the author's follower count does later.
CREATE TABLE social_feed_post (
    post_id    bigint      PRIMARY KEY,
    author     text        NOT NULL,
    created_at timestamptz NOT NULL,
    seq        bigint      NOT NULL DEFAULT nextval('social_feed_seq') UNIQUE,
    pushed     boolean     NOT NULL,
    settled_at timestamptz NOT NULL DEFAULT now()
);

-- Pull: an author's settled posts, newest first.
CREATE INDEX social_feed_post_author ON social_feed_post (author, created_at DESC, post_id DESC);
-- Hybrid: the posts that were not pushed (authors over the threshold).
CREATE INDEX social_feed_post_unpushed ON social_feed_post (author, created_at DESC, post_id DESC) WHERE NOT pushed;

-- Authors with at least one post that was not pushed: the only authors a
-- hybrid read pulls from (FEED-I2 checks that none is missing), and the
-- readers a push read cannot serve from the inbox alone.
CREATE TABLE social_feed_pull_author (
    author   text        PRIMARY KEY,
    added_at timestamptz NOT NULL DEFAULT now()
);

-- The inbox: a candidate row per (reader, pushed post), written when the
-- post settles (to the author's active followers at that moment) or when a
-- follow becomes active (the author's pushed posts so far). Rows are never
-- trusted: unfollow, block and a post turned SELF leave them in place and
-- the read filters them out. The key is the read order; (reader, post_id)
-- is unique through it because created_at is a function of post_id
-- (FEED-I2 checks it).
CREATE TABLE social_feed_inbox (
    reader     text        NOT NULL,
    created_at timestamptz NOT NULL,
    post_id    bigint      NOT NULL,
    PRIMARY KEY (reader, created_at, post_id)
);

-- The recorded response log (FENCELAB_FEED_RESPONSE_LOG=true): one row per
-- post served, with the versions of the follow row and of the post that
-- the serving statement saw. FEED-I1 replays them: the follow must have
-- been active and the post not SELF at those versions. Pruned to the
-- newest FENCELAB_FEED_RESPONSE_LOG_ROWS rows.
CREATE TABLE social_feed_served (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reader         text        NOT NULL,
    post_id        bigint      NOT NULL,
    author         text        NOT NULL,
    strategy       text        NOT NULL CHECK (strategy IN ('push', 'pull', 'hybrid')),
    follow_version bigint      NOT NULL,
    post_version   bigint      NOT NULL,
    served_at      timestamptz NOT NULL DEFAULT now()
);

-- The inbox and the settled posts are a derived view of social.post and
-- social.rel: REL-I4 checks their consumer's lag against this bound, and
-- /social/views and fencelab_social_view_lag_* show it.
INSERT INTO social_view (name, consumer, topics, max_lag, description) VALUES
    ('feed_inbox', 'social.feed.fanout', ARRAY['social.post', 'social.rel'], interval '1 minute',
     'settled posts and home-feed inboxes (social_feed_post, social_feed_inbox)');
