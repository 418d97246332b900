DROP TABLE IF EXISTS social_feed_inbox_horizon;
DROP INDEX IF EXISTS social_feed_inbox_created;
