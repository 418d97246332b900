-- Every module's format checks (#25), same rules, written so that
-- PostgreSQL's regex engine checks them in a fraction of the time.
--
-- PostgreSQL expands a counted repetition such as {0,99} into that many
-- copies of its states, and a CHECK runs on every new row version, also
-- when the UPDATE did not touch the column: every claim and every
-- completion re-checked the job's kind. `'bench.noop' ~
-- '^[a-z][a-z0-9_.:-]{0,99}$'` costs about 6.8 µs; the same rule as
-- `char_length(kind) <= 100 AND kind ~ '^[a-z][a-z0-9_.:-]*$'` about
-- 0.4 µs (300,000 evaluations in psql, 2.03 s against 0.22 s). In a
-- profile of `fencelab bench claim` the old job_kind_check was 13% of the
-- machine's CPU.
--
-- Each pair accepts exactly the same strings: the character classes are
-- ASCII, so a matching string's char_length is its length in the regex's
-- terms, and the length test comes first so that an overlong value never
-- reaches the regex. core/pg TestFormatChecksAcceptWhatTheirCountedFormsDid
-- holds every pair to the form it replaces, string by string. Each
-- constraint keeps its name; re-adding it scans its table once.

-- claim (0020)
ALTER TABLE job DROP CONSTRAINT job_kind_check,
    ADD CONSTRAINT job_kind_check CHECK (char_length(kind) <= 100 AND kind ~ '^[a-z][a-z0-9_.:-]*$');

-- idem and outbox (0030, 0031)
ALTER TABLE idem_request DROP CONSTRAINT idem_request_scope_check,
    ADD CONSTRAINT idem_request_scope_check CHECK (char_length(scope) <= 64 AND scope ~ '^[a-z][a-z0-9_.:-]*$');
ALTER TABLE outbox_event DROP CONSTRAINT outbox_event_topic_check,
    ADD CONSTRAINT outbox_event_topic_check CHECK (char_length(topic) <= 64 AND topic ~ '^[a-z][a-z0-9_.-]*$');
ALTER TABLE outbox_consumer DROP CONSTRAINT outbox_consumer_name_check,
    ADD CONSTRAINT outbox_consumer_name_check CHECK (char_length(name) <= 64 AND name ~ '^[a-z][a-z0-9_.-]*$');

-- points (0100)
ALTER TABLE points_account DROP CONSTRAINT points_account_id_format,
    ADD CONSTRAINT points_account_id_format CHECK (
        (kind = 'user' AND char_length(id) <= 64 AND id ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$')
     OR (kind = 'system' AND char_length(id) <= 36 AND id ~ '^sys:[a-z]+$'));

-- flashsale (0200)
ALTER TABLE flashsale_sku DROP CONSTRAINT flashsale_sku_format,
    ADD CONSTRAINT flashsale_sku_format CHECK (char_length(sku) <= 64 AND sku ~ '^[a-z0-9][a-z0-9._-]*$');

-- social rel and like (0300, 0320)
ALTER TABLE social_user DROP CONSTRAINT social_user_user_id_check,
    ADD CONSTRAINT social_user_user_id_check CHECK (char_length(user_id) <= 128 AND user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$');
ALTER TABLE social_like DROP CONSTRAINT social_like_user_id_check,
    ADD CONSTRAINT social_like_user_id_check CHECK (char_length(user_id) <= 128 AND user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$');

-- notify (0400)
ALTER TABLE notify_user DROP CONSTRAINT notify_user_user_id_check,
    ADD CONSTRAINT notify_user_user_id_check CHECK (char_length(user_id) <= 128 AND user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$');
ALTER TABLE notify_notification DROP CONSTRAINT notify_notification_event_key_check,
    ADD CONSTRAINT notify_notification_event_key_check CHECK (char_length(event_key) <= 200 AND event_key ~ '^[A-Za-z0-9][A-Za-z0-9._:/@-]*$'),
    DROP CONSTRAINT notify_notification_template_check,
    ADD CONSTRAINT notify_notification_template_check CHECK (char_length(template) <= 100 AND template ~ '^[a-z][a-z0-9_.-]*$');

-- shortlink (0500)
ALTER TABLE shortlink_links DROP CONSTRAINT shortlink_links_code_format,
    ADD CONSTRAINT shortlink_links_code_format CHECK (char_length(code) BETWEEN 3 AND 64 AND code ~ '^[A-Za-z0-9_-]*$');

-- upload (0600)
ALTER TABLE upload_blob DROP CONSTRAINT upload_blob_sha256_check,
    ADD CONSTRAINT upload_blob_sha256_check CHECK (char_length(sha256) = 64 AND sha256 ~ '^[0-9a-f]*$');
ALTER TABLE upload_session DROP CONSTRAINT upload_session_sha256_check,
    ADD CONSTRAINT upload_session_sha256_check CHECK (char_length(sha256) = 64 AND sha256 ~ '^[0-9a-f]*$');
ALTER TABLE upload_chunk DROP CONSTRAINT upload_chunk_sha256_check,
    ADD CONSTRAINT upload_chunk_sha256_check CHECK (char_length(sha256) = 64 AND sha256 ~ '^[0-9a-f]*$');
