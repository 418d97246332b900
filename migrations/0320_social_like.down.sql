DROP FUNCTION IF EXISTS social_like_unapplied(bigint);
DROP TABLE IF EXISTS social_like_count;
DROP TABLE IF EXISTS social_like;
DROP FUNCTION IF EXISTS social_like_guard();
