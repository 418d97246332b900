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
//
// Each topic is one range of outbox_event_topic_order starting at the
// position, cut at $4 rows; the union of those ranges holds the first $4
// events of the merged order. A batch examines at most topics × $4 rows,
// however many events of other topics (or purged history) surround them.
const sqlRead = `
WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon)
SELECT h.horizon, e.id, e.tx_id, e.topic, e.key, e.payload, e.created_at
  FROM h
  LEFT JOIN LATERAL (
        SELECT x.id, x.tx_id, x.topic, x.key, x.payload, x.created_at
          FROM (SELECT DISTINCT unnest($1::text[]) AS topic) t
         CROSS JOIN LATERAL (
               SELECT id, tx_id, topic, key, payload, created_at
                 FROM outbox_event
                WHERE topic = t.topic
                  AND (tx_id, id) > ($2::xid8, $3::bigint)
                  AND tx_id < h.horizon
                ORDER BY tx_id, id
                LIMIT $4) x
         ORDER BY x.tx_id, x.id
         LIMIT $4) e ON true
 ORDER BY e.tx_id, e.id`

// sqlPeek is the cheap idle check: is anything readable after the
// position? Run outside a transaction, it costs no xid and no commit. One
// index probe per topic.
const sqlPeek = `
SELECT EXISTS (
  SELECT 1
    FROM (SELECT DISTINCT unnest($1::text[]) AS topic) t
   CROSS JOIN LATERAL (
         SELECT 1 FROM outbox_event
          WHERE topic = t.topic
            AND (tx_id, id) > ($2::xid8, $3::bigint)
            AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
          ORDER BY tx_id, id
          LIMIT 1) x)`

// sqlLastEvent is the last committed event on the topics, in read order:
// the last entry of each topic's range, then the largest of those.
const sqlLastEvent = `
SELECT x.tx_id, x.id
  FROM (SELECT DISTINCT unnest($1::text[]) AS topic) t
 CROSS JOIN LATERAL (
       SELECT tx_id, id FROM outbox_event WHERE topic = t.topic ORDER BY tx_id DESC, id DESC LIMIT 1) x
 ORDER BY x.tx_id DESC, x.id DESC
 LIMIT 1`

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

// LagCountCap is where the lag count saturates: counting is one index
// range per topic from the position, so an unbounded count would make a
// scrape cost the lag of a consumer that stopped days ago. Past the cap
// the gauge reads LagCountCap; lag_seconds still tells how far behind.
const LagCountCap = 100_000

// sqlStatus is every consumer with its lag: the events after its position
// on its topics (including those not yet below the horizon, counted up to
// LagCountCap per topic) and the age, on the database clock, of the first
// of them in read order (0 when caught up). Each topic is one range of
// outbox_event_topic_order starting at the position: the scrape examines
// the lag, never the history before it.
const sqlStatus = `
SELECT c.name, c.topics, c.position_tx, c.position_id, c.processed, c.owner, c.fence, c.lease_until,
       c.updated_at, lag.events,
       coalesce(greatest(extract(epoch FROM now() - lag.oldest), 0), 0)::float8
  FROM outbox_consumer c
 CROSS JOIN LATERAL (
       SELECT coalesce(sum(n.events), 0)::bigint AS events, min(f.created_at) AS oldest
         FROM (SELECT DISTINCT unnest(c.topics) AS topic) t
        CROSS JOIN LATERAL (
              SELECT count(*) AS events FROM (
                     SELECT 1 FROM outbox_event e
                      WHERE e.topic = t.topic AND (e.tx_id, e.id) > (c.position_tx, c.position_id)
                      ORDER BY e.tx_id, e.id
                      LIMIT ` + lagCap + `) l) n
         LEFT JOIN LATERAL (
              SELECT e.created_at FROM outbox_event e
               WHERE e.topic = t.topic AND (e.tx_id, e.id) > (c.position_tx, c.position_id)
               ORDER BY e.tx_id, e.id
               LIMIT 1) f ON true) lag
 ORDER BY c.name`

const lagCap = "100000" // LagCountCap, spelled for the SQL

// sqlPurge deletes up to $2 events created more than $1 microseconds ago
// (database clock) that every consumer subscribed to their topic has
// passed, with those consumers' inbox rows, in one statement (OUTBOX-I1
// never sees an inbox row without its event). Events of a topic nobody
// consumes (points.debited, flashsale.order_paid) are history too: they
// go after the same retention — a consumer added later starts from what
// is left (docs/DATA.md).
//
// The topics come from a loose index scan of outbox_event_topic_order
// (one probe per topic). A topic whose first event is younger than the
// cutoff costs that probe alone; otherwise its range is read from the
// head in (tx_id, id) order up to the slowest subscriber's position and at
// most $2 rows, and the old ones are taken. Purged events leave the head,
// so a batch examines about what it deletes, however much history the
// other topics (or a stalled consumer's topic) hold. Keys travel as
// arrays (= ANY (ARRAY(…))) so every delete is index probes, never a
// hash join over the table; an inbox row exists only for a subscribed
// consumer, so probing every consumer's key finds exactly those.
const sqlPurge = `
WITH RECURSIVE topics AS (
    (SELECT topic FROM outbox_event ORDER BY topic LIMIT 1)
    UNION ALL
    SELECT (SELECT e.topic FROM outbox_event e WHERE e.topic > t.topic ORDER BY e.topic LIMIT 1)
      FROM topics t WHERE t.topic IS NOT NULL
), bounds AS (
    -- No subscriber: no position bound (the largest xid8 and id).
    SELECT t.topic, coalesce(b.position_tx, '18446744073709551615'::xid8) AS upto_tx,
           coalesce(b.position_id, 9223372036854775807) AS upto_id
      FROM topics t
      LEFT JOIN LATERAL (
            SELECT c.position_tx, c.position_id FROM outbox_consumer c
             WHERE t.topic = ANY (c.topics)
             ORDER BY c.position_tx, c.position_id
             LIMIT 1) b ON true
     WHERE t.topic IS NOT NULL
       AND (SELECT e.created_at FROM outbox_event e WHERE e.topic = t.topic ORDER BY e.tx_id, e.id LIMIT 1)
           < now() - $1::bigint * interval '1 microsecond'
), head AS (
    SELECT h.id
      FROM bounds b
     CROSS JOIN LATERAL (
           SELECT e.id, e.created_at FROM outbox_event e
            WHERE e.topic = b.topic AND (e.tx_id, e.id) <= (b.upto_tx, b.upto_id)
            ORDER BY e.tx_id, e.id
            LIMIT $2) h
     WHERE h.created_at < now() - $1::bigint * interval '1 microsecond'
     LIMIT $2
), victims AS (
    SELECT e.id FROM outbox_event e
     WHERE e.id = ANY (ARRAY(SELECT id FROM head))
       FOR UPDATE SKIP LOCKED
), inbox AS (
    DELETE FROM outbox_inbox i
     WHERE i.consumer = ANY (ARRAY(SELECT name FROM outbox_consumer))
       AND i.event_id = ANY (ARRAY(SELECT id FROM victims))
)
DELETE FROM outbox_event e WHERE e.id = ANY (ARRAY(SELECT id FROM victims))`

// sqlPurgeDemo deletes up to $2 demo effects older than $1 microseconds
// (the demo consumer's output, FENCELAB_OUTBOX_DEMO=1): the head of the
// seq order, oldest first, never more than one batch examined.
const sqlPurgeDemo = `
DELETE FROM outbox_demo_effect d
 WHERE d.seq IN (
       SELECT x.seq FROM outbox_demo_effect x
        WHERE x.seq IN (SELECT h.seq FROM (SELECT seq, applied_at FROM outbox_demo_effect ORDER BY seq LIMIT $2) h
                         WHERE h.applied_at < now() - $1::bigint * interval '1 microsecond')
          FOR UPDATE SKIP LOCKED)`
