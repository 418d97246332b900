-- Home feed, bounded growth (docs/DATA.md): a new follow's backfill copies
-- the author's newest FENCELAB_FEED_BACKFILL_POSTS pushed posts, read from
-- this index newest first and stopped at the bound.
CREATE INDEX IF NOT EXISTS social_feed_post_pushed ON social_feed_post (author, created_at DESC, post_id DESC) WHERE pushed;
