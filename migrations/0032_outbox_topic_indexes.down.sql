DROP INDEX IF EXISTS outbox_event_social_like;
