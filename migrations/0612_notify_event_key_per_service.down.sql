-- Fails, leaving the schema as it is, if two services have since used one
-- event_key for one user: narrowing the key would have to drop one of
-- their notifications, which a migration does not decide.
ALTER TABLE notify_notification
    DROP CONSTRAINT notify_notification_one_per_event,
    ADD CONSTRAINT notify_notification_one_per_event UNIQUE (user_id, event_key);
