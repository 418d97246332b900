DROP INDEX IF EXISTS outbox_event_topic_order;
