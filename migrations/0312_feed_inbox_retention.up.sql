-- Home feed, bounded growth (docs/DATA.md): inbox rows of posts older than
-- FENCELAB_FEED_INBOX_RETENTION are deleted by the feed.purge kind, oldest
-- first from this index.
CREATE INDEX IF NOT EXISTS social_feed_inbox_created ON social_feed_inbox (created_at);

-- The purge's horizon: the newest cutoff it has purged below, written in
-- the statement that deletes. Inbox rows of posts created before it may be
-- gone, so FEED-I2 judges push's completeness only at or after it (a push
-- read reaches back to the horizon; pull and hybrid's pull side read the
-- settled posts and reach further). One row, or none before the first
-- purge.
CREATE TABLE IF NOT EXISTS social_feed_inbox_horizon (
    one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
    horizon timestamptz NOT NULL
);
