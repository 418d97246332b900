DELETE FROM social_view WHERE name = 'feed_inbox';
DROP TABLE IF EXISTS social_feed_served;
DROP TABLE IF EXISTS social_feed_inbox;
DROP TABLE IF EXISTS social_feed_pull_author;
DROP TABLE IF EXISTS social_feed_post;
DROP SEQUENCE IF EXISTS social_feed_seq;
