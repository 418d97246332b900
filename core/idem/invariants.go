package idem

import "github.com/fencelab/fencelab/core/invariant"

// IDEM-I1 has two halves. This package checks the record half: at most one
// record per (scope, subject, key) — the primary key, re-checked here so
// `fencelab check` would see a dropped constraint — and every finished
// record carries the response it replays. The effect half ("each finished
// record's effect exists exactly once") depends on the effect, so each
// module that uses Keys registers it next to its own tables (e.g. PTS-I2).
var Invariants = []invariant.Invariant{
	{
		ID:        "IDEM-I1",
		Module:    "idem",
		Chapter:   "idem",
		Statement: "at most one record per (scope, subject, key); a finished record holds its response and an in-flight one a lock expiry",
		SQL: `SELECT scope, subject, key, count(*) AS records, 'duplicate key' AS problem
		        FROM idem_request GROUP BY scope, subject, key HAVING count(*) > 1
		      UNION ALL
		      SELECT scope, subject, key, 1, 'finished without a response'
		        FROM idem_request
		       WHERE state = 'done' AND (status IS NULL OR body IS NULL OR locked_until IS NOT NULL)
		      UNION ALL
		      SELECT scope, subject, key, 1, 'in flight without a lock expiry'
		        FROM idem_request
		       WHERE state = 'in_flight' AND (locked_until IS NULL OR status IS NOT NULL)`,
	},
}
