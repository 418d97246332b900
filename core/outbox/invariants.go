package outbox

import "github.com/fencelab/fencelab/core/invariant"

// Invariants are the package's SQL invariants; its module lists them in
// app.Module.Invariants.
var Invariants = []invariant.Invariant{

	{
		ID:        "OUTBOX-I1",
		Module:    "outbox",
		Chapter:   "outbox",
		Statement: "every processed inbox row refers to an existing event on one of its consumer's topics",
		SQL: `SELECT i.consumer, i.event_id,
			             CASE WHEN e.id IS NULL THEN 'no such event'
			                  WHEN c.name IS NULL THEN 'no such consumer'
			                  ELSE 'topic ' || e.topic || ' not subscribed' END AS problem
			        FROM outbox_inbox i
			        LEFT JOIN outbox_event e ON e.id = i.event_id
			        LEFT JOIN outbox_consumer c ON c.name = i.consumer
			       WHERE e.id IS NULL OR c.name IS NULL OR NOT (e.topic = ANY (c.topics))`,
	},
	{
		ID:        "OUTBOX-I2",
		Module:    "outbox",
		Chapter:   "outbox",
		Statement: "no consumer position is past an event on its topics that it has not processed (no inbox row)",
		SQL: `SELECT c.name AS consumer, e.id AS event_id, e.topic, e.tx_id::text AS tx_id,
			             c.position_tx::text AS position_tx, c.position_id
			        FROM outbox_consumer c
			        JOIN outbox_event e
			          ON e.topic = ANY (c.topics)
			         AND (e.tx_id, e.id) <= (c.position_tx, c.position_id)
			       WHERE NOT EXISTS (SELECT 1 FROM outbox_inbox i
			                          WHERE i.consumer = c.name AND i.event_id = e.id)`,
	},
	{
		ID:        "OUTBOX-I3",
		Module:    "outbox",
		Chapter:   "outbox",
		Statement: "the demo consumer applies each event once: one effect row per event",
		// The effect itself, the ground truth of "exactly once": its
		// table has no unique key on purpose (migration 0031), so a
		// redelivered event applied again shows here as a second row,
		// whatever the inbox says.
		SQL: `SELECT event_id, count(*) AS effects, string_agg(owner || '@' || fence, ', ' ORDER BY seq) AS applied_by
			        FROM outbox_demo_effect GROUP BY event_id HAVING count(*) > 1`,
	},
}
