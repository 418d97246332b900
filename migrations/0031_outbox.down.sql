DROP TABLE IF EXISTS outbox_demo_effect;
DROP TABLE IF EXISTS outbox_inbox;
DROP TABLE IF EXISTS outbox_consumer;
DROP TABLE IF EXISTS outbox_event;
