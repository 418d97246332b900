CREATE INDEX IF NOT EXISTS outbox_event_order ON outbox_event (tx_id, id);
DROP INDEX IF EXISTS outbox_event_topic_order;
