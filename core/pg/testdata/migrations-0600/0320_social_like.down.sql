DROP FUNCTION IF EXISTS social_like_unapplied(bigint);
DROP INDEX IF EXISTS outbox_event_social_like;
DROP TABLE IF EXISTS social_like_count;
DROP TABLE IF EXISTS social_like;
DROP FUNCTION IF EXISTS social_like_guard();
