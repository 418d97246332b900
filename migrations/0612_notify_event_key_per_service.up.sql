-- notify (0400): an event_key is the submitting service's own name for its
-- event, so it is unique per service, not across services. Under the old
-- key (user_id, event_key) a second service that happened to use — or
-- guessed — another's key got that service's notification back as "the
-- existing one" (200, with its template, data and tasks), and its own
-- event was never sent. NTF-I1 now reads: one (user_id, submitted_by,
-- event_key) makes one logical notification. submitted_by is the verified
-- subject of the service token that submitted it, never a client field.
--
-- The constraint keeps its name (NTF-I1 checks it by name and by its
-- columns); user_id stays first so reads by user keep their index prefix.
-- Widening a unique key cannot fail on existing rows.
ALTER TABLE notify_notification
    DROP CONSTRAINT notify_notification_one_per_event,
    ADD CONSTRAINT notify_notification_one_per_event UNIQUE (user_id, submitted_by, event_key);
