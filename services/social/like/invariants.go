package like

import "github.com/fencelab/fencelab/core/invariant"

const chapter = "like counters (chapter 10)"

// Every check returns (problem, item, user_id, detail).

// sqlLIKE1: one fact per (item, user), and liked agrees with the
// version's parity (a fact starts liked at version 1 and every change flips
// it). The primary key and the guard trigger that make every update exactly
// one flip with version + 1 are LIKE-S1's.
const sqlLIKE1 = `
SELECT 'two facts for one (item, user)' AS problem, item_id::text AS item, user_id, format('%s rows', count(*)) AS detail
  FROM social_like GROUP BY item_id, user_id HAVING count(*) > 1
UNION ALL
SELECT 'liked disagrees with the version', item_id::text, user_id, format('liked %s at version %s', liked, version)
  FROM social_like WHERE version < 1 OR liked <> (version % 2 = 1)`

// sqlLIKE2: the current version of every fact has its event — written by
// the same transaction, carrying the same state and version — unless the
// outbox purged it, which it does only once every consumer of the topic
// has read past it. No version of a fact has two events, no event is
// ahead of its fact, and every event's state matches its version.
const sqlLIKE2 = `
SELECT 'change without its event' AS problem, f.item_id::text AS item, f.user_id,
       format('version %s (liked %s) by transaction %s', f.version, f.liked, f.changed_tx) AS detail
  FROM social_like f
 WHERE NOT EXISTS (
        SELECT 1 FROM outbox_event e
         WHERE e.topic = 'social.like' AND e.key = f.item_id::text AND e.tx_id = f.changed_tx
           AND e.payload->>'user_id' = f.user_id AND (e.payload->>'version')::bigint = f.version
           AND (e.payload->>'liked')::boolean = f.liked)
   AND NOT (NOT EXISTS (SELECT 1 FROM outbox_event e
                         WHERE e.topic = 'social.like' AND e.key = f.item_id::text AND e.tx_id = f.changed_tx)
            AND EXISTS (SELECT 1 FROM outbox_consumer c WHERE 'social.like' = ANY (c.topics))
            AND NOT EXISTS (SELECT 1 FROM outbox_consumer c
                             WHERE 'social.like' = ANY (c.topics)
                               AND (c.position_tx, c.position_id) <= (f.changed_tx, 0::bigint)))
UNION ALL
SELECT 'two events carry one version', e.key, e.payload->>'user_id',
       format('version %s: events %s', e.payload->>'version', string_agg(e.id::text, ','))
  FROM outbox_event e WHERE e.topic = 'social.like'
 GROUP BY e.key, e.payload->>'user_id', e.payload->>'version'
HAVING count(*) > 1
UNION ALL
SELECT 'event ahead of its fact', e.key, e.payload->>'user_id',
       format('event %s has version %s, fact has %s', e.id, e.payload->>'version', coalesce(f.version, 0))
  FROM outbox_event e
  LEFT JOIN social_like f ON f.item_id::text = e.key AND f.user_id = e.payload->>'user_id'
 WHERE e.topic = 'social.like' AND (e.payload->>'version')::bigint > coalesce(f.version, 0)
UNION ALL
SELECT 'event state disagrees with its version', e.key, e.payload->>'user_id',
       format('event %s: liked %s at version %s', e.id, e.payload->>'liked', e.payload->>'version')
  FROM outbox_event e
 WHERE e.topic = 'social.like'
   AND (e.payload->>'liked')::boolean <> ((e.payload->>'version')::bigint % 2 = 1)`

// countState is every item with a fact or a count: the stored count, the
// liked facts, and the events the count does not include yet
// (social_like_unapplied) — all in the statement's one snapshot.
const countState = `
WITH items AS (
    SELECT DISTINCT item_id FROM social_like UNION SELECT item_id FROM social_like_count
), state AS (
    SELECT i.item_id, coalesce(c.n, 0) AS count,
           (SELECT count(*) FROM social_like f WHERE f.item_id = i.item_id AND f.liked) AS truth,
           u.events AS unapplied
      FROM items i
      LEFT JOIN social_like_count c USING (item_id)
     CROSS JOIN LATERAL social_like_unapplied(i.item_id) u
)`

// sqlLIKE3: an item whose events have all been counted has count = liked
// facts.
const sqlLIKE3 = countState + `
SELECT 'caught-up count differs from the facts' AS problem, item_id::text AS item, NULL::text AS user_id,
       format('count %s, liked facts %s, no event pending', count, truth) AS detail
  FROM state WHERE unapplied = 0 AND count <> truth`

// sqlLIKE4: every count is within its bound of the truth.
const sqlLIKE4 = countState + `
SELECT 'count beyond its error bound' AS problem, item_id::text AS item, NULL::text AS user_id,
       format('count %s, liked facts %s, off by %s with %s events pending', count, truth, abs(count - truth), unapplied) AS detail
  FROM state WHERE abs(count - truth) > unapplied`

// Invariants are the package's SQL invariants; its module lists them in
// app.Module.Invariants.
var Invariants = []invariant.Invariant{

	{
		ID: "LIKE-I1", Module: "social", Chapter: chapter,
		Statement: "at most one fact row per (user, item); liked is the current state; version +1 per state change",
		SQL:       sqlLIKE1,
	},
	{
		ID: "LIKE-I2", Module: "social", Chapter: chapter,
		Statement: "every state change writes exactly one outbox event",
		SQL:       sqlLIKE2,
	},
	{
		ID: "LIKE-I3", Module: "social", Chapter: chapter,
		Statement: "once the consumer has caught up, count = number of liked facts for every item",
		SQL:       sqlLIKE3,
	},
	{
		ID: "LIKE-I4", Module: "social", Chapter: chapter,
		Statement: "at any time, for every item, abs(count - truth) <= the number of that item's events not yet applied (social_like_unapplied, served as error_bound)",
		SQL:       sqlLIKE4,
	},
	{
		ID: "LIKE-S1", Module: "social", Chapter: chapter, Schema: true,
		Statement: "the likes schema keeps its guards: social_like's primary key and its guard trigger (one flip, version + 1, behind LIKE-I1)",
		SQL: `
SELECT 'social_like has no primary key' AS problem, 'social_like' AS detail
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'social_like'::regclass AND contype = 'p')
UNION ALL
SELECT 'social_like guard trigger missing or disabled', 'social_like_guard'
 WHERE NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'social_like'::regclass
                      AND tgname = 'social_like_guard' AND tgenabled <> 'D')`,
	},
}
