DROP INDEX IF EXISTS social_feed_post_pushed;
