package rel

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/core/invariant"
)

const chapter = "follow relations (chapter 8)"

// Every check returns (problem, view, follower, followee, detail).

// sqlREL1: one row per pair (the primary key itself is REL-S1's), and for every changed row
// the event of its current version exists — same id, transaction, pair,
// state and version — unless the outbox purged it, which it does only
// once every consumer of the topic has passed it. Among the events still
// kept, no two carry one pair's version and none is ahead of its row.
const sqlREL1 = `
SELECT 'changed row without its event' AS problem, NULL::text AS view, r.follower, r.followee,
       format('version %s, event %s', r.version, r.event_id) AS detail
  FROM social_relation r
 WHERE r.version > 0
   AND NOT EXISTS (
        SELECT 1 FROM outbox_event e
         WHERE e.id = r.event_id AND e.topic = 'social.rel' AND e.tx_id = r.changed_tx
           AND e.payload->>'follower' = r.follower AND e.payload->>'followee' = r.followee
           AND e.payload->>'state' = r.state AND (e.payload->>'version')::bigint = r.version)
   AND NOT (NOT EXISTS (SELECT 1 FROM outbox_event e WHERE e.id = r.event_id)
            AND EXISTS (SELECT 1 FROM outbox_consumer c WHERE 'social.rel' = ANY (c.topics))
            AND NOT EXISTS (SELECT 1 FROM outbox_consumer c
                             WHERE 'social.rel' = ANY (c.topics)
                               AND (r.changed_tx, r.event_id) > (c.position_tx, c.position_id)))
UNION ALL
SELECT 'two events carry one version', NULL, e.payload->>'follower', e.payload->>'followee',
       format('version %s: events %s', e.payload->>'version', string_agg(e.id::text, ','))
  FROM outbox_event e WHERE e.topic = 'social.rel'
 GROUP BY e.payload->>'follower', e.payload->>'followee', e.payload->>'version'
HAVING count(*) > 1
UNION ALL
SELECT 'event ahead of its row', NULL, e.payload->>'follower', e.payload->>'followee',
       format('event %s has version %s, row has %s', e.id, e.payload->>'version', coalesce(r.version, 0))
  FROM outbox_event e
  LEFT JOIN social_relation r ON r.follower = e.payload->>'follower' AND r.followee = e.payload->>'followee'
 WHERE e.topic = 'social.rel' AND (e.payload->>'version')::bigint > coalesce(r.version, 0)`

// sqlREL2: a block and an active or pending follow never coexist in a
// pair (the blocking row itself cannot be both).
const sqlREL2 = `
SELECT 'follow inside a blocked pair' AS problem, NULL::text AS view, f.follower, f.followee,
       format('%s blocks %s; %s > %s is %s', b.follower, b.followee, f.follower, f.followee, f.state) AS detail
  FROM social_relation b
  JOIN social_relation f ON f.follower = b.followee AND f.followee = b.follower
 WHERE b.state = 'blocked' AND f.state IN ('pending', 'active')`

// pendingCTE is the view's unapplied pairs: relation events after its
// consumer's position (a consumer that never ran has applied nothing).
const pendingCTE = `
pending AS (
    SELECT DISTINCT e.payload->>'follower' AS follower, e.payload->>'followee' AS followee
      FROM outbox_event e
      LEFT JOIN outbox_consumer c ON c.name = '%[2]s'
     WHERE e.topic = 'social.rel'
       AND (e.tx_id, e.id) > (coalesce(c.position_tx, '0'::xid8), coalesce(c.position_id, 0)))`

// sqlREL3View: the view is never ahead of the truth table, and once a
// pair has no unapplied event its version equals the truth's: replays in
// any order and number converge.
const sqlREL3View = `
SELECT * FROM (WITH ` + pendingCTE + `
SELECT 'view ahead of the truth table' AS problem, '%[1]s' AS view, r.follower, r.followee,
       format('view version %%s, truth version %%s', v.version, coalesce(r.version, 0)) AS detail
  FROM %[3]s v
  LEFT JOIN social_relation r ON r.%[4]s = v.user_id AND r.%[5]s = v.peer_id
 WHERE v.version > coalesce(r.version, 0)
UNION ALL
SELECT 'caught-up pair differs from the truth table', '%[1]s', r.follower, r.followee,
       format('view version %%s, truth version %%s', coalesce(v.version, 0), r.version)
  FROM social_relation r
  LEFT JOIN %[3]s v ON v.user_id = r.%[4]s AND v.peer_id = r.%[5]s
 WHERE r.version > 0 AND r.version <> coalesce(v.version, 0)
   AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.follower = r.follower AND p.followee = r.followee)) q`

// sqlREL4View: the view agrees with the truth table on who follows whom
// except for pairs it has events pending for, and its counts equal its
// active rows.
const sqlREL4View = `
SELECT * FROM (WITH ` + pendingCTE + `
SELECT 'view and truth disagree on a follow, no event pending' AS problem, '%[1]s' AS view,
       coalesce(r.follower, v.follower) AS follower, coalesce(r.followee, v.followee) AS followee,
       format('truth %%s, view active %%s', coalesce(r.state, 'none'), coalesce(v.active, false)) AS detail
  FROM social_relation r
  FULL JOIN (SELECT user_id AS %[4]s, peer_id AS %[5]s, active FROM %[3]s) v
    ON v.follower = r.follower AND v.followee = r.followee
 WHERE (coalesce(r.state, 'none') = 'active') <> coalesce(v.active, false)
   AND NOT EXISTS (SELECT 1 FROM pending p
                    WHERE p.follower = coalesce(r.follower, v.follower) AND p.followee = coalesce(r.followee, v.followee))
UNION ALL
SELECT 'count differs from the view', '%[1]s', a.user_id, NULL,
       format('count %%s, active rows %%s', coalesce(c.n, 0), coalesce(a.n, 0))
  FROM (SELECT user_id, count(*) FILTER (WHERE active) AS n FROM %[3]s GROUP BY user_id) a
  FULL JOIN %[6]s c USING (user_id)
 WHERE coalesce(a.n, 0) <> coalesce(c.n, 0)) q`

// sqlREL4Lag: no declared view has an unapplied event older than its
// declared bound (social_view.max_lag) — the lag is declared and held.
const sqlREL4Lag = `
SELECT 'view lags beyond its declared bound' AS problem, sv.name AS view, NULL::text AS follower, NULL::text AS followee,
       format('oldest unapplied event %s old, bound %s', now() - min(e.created_at), sv.max_lag) AS detail
  FROM social_view sv
  LEFT JOIN outbox_consumer c ON c.name = sv.consumer
  JOIN outbox_event e ON e.topic = ANY (sv.topics)
   AND (e.tx_id, e.id) > (coalesce(c.position_tx, '0'::xid8), coalesce(c.position_id, 0))
 GROUP BY sv.name, sv.max_lag
HAVING now() - min(e.created_at) > sv.max_lag`

func viewChecks(tmpl string) string {
	parts := make([]string, 0, len(Views))
	for _, v := range Views {
		parts = append(parts, fmt.Sprintf(tmpl, v.Name, v.ConsumerName, v.Table, v.userCol, v.peerCol, v.CountTable))
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// Invariants are the package's SQL invariants; its module lists them in
// app.Module.Invariants.
var Invariants = []invariant.Invariant{

	{
		ID: "REL-I1", Module: "social", Chapter: chapter,
		Statement: "one row per (follower, followee) with a monotonically increasing version; every change writes exactly one outbox event carrying that version",
		SQL:       sqlREL1,
	},
	{
		ID: "REL-I2", Module: "social", Chapter: chapter,
		Statement: "a blocked pair has no active or pending follow in either direction",
		SQL:       sqlREL2,
	},
	{
		ID: "REL-I3", Module: "social", Chapter: chapter,
		Statement: "a derived view applies an event only if its version is newer than what it holds; replaying events in any order and any number of times converges to the truth table",
		SQL:       viewChecks(sqlREL3View),
	},
	{
		ID: "REL-I4", Module: "social", Chapter: chapter,
		Statement: "the read path (AccessCheck on the truth table) and every derived view agree on permission, or the view's allowed lag is declared and measured",
		SQL:       viewChecks(sqlREL4View) + "\nUNION ALL\n" + sqlREL4Lag,
	},
	{
		ID: "REL-S1", Module: "social", Chapter: chapter, Schema: true,
		Statement: "the relations schema keeps its guard: social_relation's primary key (one row per pair, behind REL-I1)",
		SQL: `
SELECT 'social_relation has no primary key' AS problem, 'social_relation' AS detail
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'social_relation'::regclass AND contype = 'p')`,
	},
}
