package outbox

// All of core/outbox's SQL.

// sqlAppend writes one event in the caller's transaction; tx_id defaults
// to the transaction's own xid8.
const sqlAppend = `
INSERT INTO outbox_event (topic, key, payload) VALUES ($1, $2, $3) RETURNING id`

// sqlAppendMany writes many events in one statement, in array order.
const sqlAppendMany = `
INSERT INTO outbox_event (topic, key, payload)
SELECT t, k, p FROM unnest($1::text[], $2::text[], $3::jsonb[]) WITH ORDINALITY AS m(t, k, p, n)
 ORDER BY n
RETURNING id`

// sqlMarkApplied records the current transaction's events on the
// consumer's topics in its inbox (MarkApplied).
const sqlMarkApplied = `
INSERT INTO outbox_inbox (consumer, event_id, fence)
SELECT $1::text, e.id, 0
  FROM outbox_event e
 WHERE e.tx_id = pg_current_xact_id() AND e.topic = ANY ($2::text[])
ON CONFLICT DO NOTHING`

// sqlRegister creates the consumer row once; its topics never change
// afterwards (see Register).
const sqlRegister = `
INSERT INTO outbox_consumer (name, topics) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING`

const sqlTopics = `SELECT topics FROM outbox_consumer WHERE name = $1`

// sqlAcquire takes the consumer's lease if it is free or expired, with a
// fence larger than any issued before for this consumer (the row is never
// deleted, so the counter never resets). One statement: no read-then-write.
const sqlAcquire = `
UPDATE outbox_consumer
   SET owner = $2, fence = fence + 1, lease_until = now() + $3 * interval '1 millisecond', updated_at = now()
 WHERE name = $1 AND (owner IS NULL OR lease_until <= now())
RETURNING fence`

// sqlLock opens a batch: it re-checks owner, fence and expiry, renews the
// lease and row-locks the consumer until the batch commits, so no takeover
// can interleave with the batch. Zero rows: the lease is lost.
const sqlLock = `
UPDATE outbox_consumer
   SET lease_until = now() + $4 * interval '1 millisecond'
 WHERE name = $1 AND owner = $2 AND fence = $3 AND lease_until > now()
RETURNING position_tx, position_id`

// sqlRead returns the next events after the position, and the horizon.
// Only events with tx_id below the horizon — the oldest transaction still
// running when this statement's snapshot was taken — are read: every such
// transaction has ended, so this prefix of the (tx_id, id) order is final.
// An event whose transaction commits later always sorts after it.
const sqlRead = `
WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon)
SELECT h.horizon, e.id, e.tx_id, e.topic, e.key, e.payload, e.created_at
  FROM h
  LEFT JOIN LATERAL (
        SELECT id, tx_id, topic, key, payload, created_at
          FROM outbox_event
         WHERE (tx_id, id) > ($2::xid8, $3::bigint)
           AND tx_id < h.horizon
           AND topic = ANY ($1)
         ORDER BY tx_id, id
         LIMIT $4) e ON true
 ORDER BY e.tx_id, e.id`

// sqlPeek is the cheap idle check: is anything readable after the
// position? Run outside a transaction, it costs no xid and no commit.
const sqlPeek = `
SELECT EXISTS (
  SELECT 1 FROM outbox_event
   WHERE (tx_id, id) > ($2::xid8, $3::bigint)
     AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
     AND topic = ANY ($1))`

// sqlLastEvent is the last committed event on the topics, in read order.
const sqlLastEvent = `
SELECT tx_id, id FROM outbox_event WHERE topic = ANY ($1) ORDER BY tx_id DESC, id DESC LIMIT 1`

// sqlInbox records the batch's events in the inbox and returns those that
// were not there yet; the rest were applied before (a redelivery) and are
// skipped. Same transaction as the effect: OUTBOX-I1/I2.
const sqlInbox = `
INSERT INTO outbox_inbox (consumer, event_id, fence)
SELECT $1, unnest($2::bigint[]), $3
ON CONFLICT DO NOTHING
RETURNING event_id`

// sqlAdvance moves the position forward in the batch's transaction. The
// row is locked by sqlLock, so the fence test only documents the rule.
const sqlAdvance = `
UPDATE outbox_consumer
   SET position_tx = $3, position_id = $4, processed = processed + $5, updated_at = now()
 WHERE name = $1 AND fence = $2`

// sqlRelease gives the lease back on shutdown so another runner need not
// wait for the expiry.
const sqlRelease = `
UPDATE outbox_consumer SET owner = NULL, lease_until = NULL, updated_at = now()
 WHERE name = $1 AND owner = $2 AND fence = $3`

// sqlLockForRecompute locks the consumer row (waiting for a running batch)
// and returns its position; see LockPosition.
const sqlLockForRecompute = `
SELECT position_tx, position_id FROM outbox_consumer WHERE name = $1 FOR UPDATE`

// sqlStatus is every consumer with its lag: the events after its position
// on its topics (including those not yet below the horizon) and the age of
// the oldest of them.
const sqlStatus = `
SELECT c.name, c.topics, c.position_tx, c.position_id, c.processed, c.owner, c.fence, c.lease_until,
       c.updated_at, lag.events, lag.oldest
  FROM outbox_consumer c
  CROSS JOIN LATERAL (
        SELECT count(*) AS events, min(e.created_at) AS oldest
          FROM outbox_event e
         WHERE (e.tx_id, e.id) > (c.position_tx, c.position_id)
           AND e.topic = ANY (c.topics)) lag
 ORDER BY c.name`

// sqlPurge deletes up to $2 events created before $1 that every consumer
// subscribed to their topic has passed, with those consumers' inbox rows,
// in one statement (OUTBOX-I1 never sees an inbox row without its event).
// An event no consumer subscribes to is kept: a consumer added later
// starts from the beginning and may want it.
const sqlPurge = `
WITH victims AS (
    SELECT e.id, e.topic
      FROM outbox_event e
     WHERE e.created_at < now() - $1::bigint * interval '1 microsecond'
       AND EXISTS (SELECT 1 FROM outbox_consumer c WHERE e.topic = ANY (c.topics))
       AND NOT EXISTS (SELECT 1 FROM outbox_consumer c
                        WHERE e.topic = ANY (c.topics)
                          AND (e.tx_id, e.id) > (c.position_tx, c.position_id))
     ORDER BY e.tx_id, e.id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), inbox AS (
    DELETE FROM outbox_inbox i
     USING victims v, outbox_consumer c
     WHERE v.topic = ANY (c.topics) AND i.consumer = c.name AND i.event_id = v.id
)
DELETE FROM outbox_event e USING victims v WHERE e.id = v.id`
