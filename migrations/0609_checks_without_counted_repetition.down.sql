-- The counted forms, as the owners' first migrations wrote them.
ALTER TABLE job DROP CONSTRAINT job_kind_check,
    ADD CONSTRAINT job_kind_check CHECK (kind ~ '^[a-z][a-z0-9_.:-]{0,99}$');
ALTER TABLE idem_request DROP CONSTRAINT idem_request_scope_check,
    ADD CONSTRAINT idem_request_scope_check CHECK (scope ~ '^[a-z][a-z0-9_.:-]{0,63}$');
ALTER TABLE outbox_event DROP CONSTRAINT outbox_event_topic_check,
    ADD CONSTRAINT outbox_event_topic_check CHECK (topic ~ '^[a-z][a-z0-9_.-]{0,63}$');
ALTER TABLE outbox_consumer DROP CONSTRAINT outbox_consumer_name_check,
    ADD CONSTRAINT outbox_consumer_name_check CHECK (name ~ '^[a-z][a-z0-9_.-]{0,63}$');
ALTER TABLE points_account DROP CONSTRAINT points_account_id_format,
    ADD CONSTRAINT points_account_id_format CHECK (
        (kind = 'user' AND id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
     OR (kind = 'system' AND id ~ '^sys:[a-z]{1,32}$'));
ALTER TABLE flashsale_sku DROP CONSTRAINT flashsale_sku_format,
    ADD CONSTRAINT flashsale_sku_format CHECK (sku ~ '^[a-z0-9][a-z0-9._-]{0,63}$');
ALTER TABLE social_user DROP CONSTRAINT social_user_user_id_check,
    ADD CONSTRAINT social_user_user_id_check CHECK (user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$');
ALTER TABLE social_like DROP CONSTRAINT social_like_user_id_check,
    ADD CONSTRAINT social_like_user_id_check CHECK (user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$');
ALTER TABLE notify_user DROP CONSTRAINT notify_user_user_id_check,
    ADD CONSTRAINT notify_user_user_id_check CHECK (user_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$');
ALTER TABLE notify_notification DROP CONSTRAINT notify_notification_event_key_check,
    ADD CONSTRAINT notify_notification_event_key_check CHECK (event_key ~ '^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$'),
    DROP CONSTRAINT notify_notification_template_check,
    ADD CONSTRAINT notify_notification_template_check CHECK (template ~ '^[a-z][a-z0-9_.-]{0,99}$');
ALTER TABLE shortlink_links DROP CONSTRAINT shortlink_links_code_format,
    ADD CONSTRAINT shortlink_links_code_format CHECK (code ~ '^[A-Za-z0-9_-]{3,64}$');
ALTER TABLE upload_blob DROP CONSTRAINT upload_blob_sha256_check,
    ADD CONSTRAINT upload_blob_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$');
ALTER TABLE upload_session DROP CONSTRAINT upload_session_sha256_check,
    ADD CONSTRAINT upload_session_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$');
ALTER TABLE upload_chunk DROP CONSTRAINT upload_chunk_sha256_check,
    ADD CONSTRAINT upload_chunk_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$');
