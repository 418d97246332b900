-- Outbox, bounded growth (docs/DATA.md).
--
-- Every read of the outbox is per topic: a consumer's batch, its idle
-- peek, its lag, the views' lag and the retention purge. On (tx_id, id)
-- alone, a topic nobody reads (points.debited at thousands a second) sits
-- between every other topic's events, and each of those queries walked
-- it. On (topic, tx_id, id) each of them is one range per topic: it
-- examines the events it returns, counts or deletes, and nothing else.
CREATE INDEX IF NOT EXISTS outbox_event_topic_order ON outbox_event (topic, tx_id, id);

-- Nothing reads the outbox across topics any more, and the old order
-- index only tempts the planner into walking every topic's events with a
-- filter (a generic plan cannot tell a busy topic from an idle one). One
-- index less on the table every business transaction appends to.
DROP INDEX IF EXISTS outbox_event_order;

-- The demo consumer's effects are purged with the events they came from
-- (outbox.purge, FENCELAB_OUTBOX_RETENTION): oldest first by seq.
