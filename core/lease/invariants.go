package lease

import "github.com/fencelab/fencelab/core/invariant"

// Chapter is the slug of the book's chapter 1 (core/lab.Chapters), where
// this package's invariants are argued.
const Chapter = "lease"

// Invariants are the package's SQL invariants; its module lists them in
// app.Module.Invariants.
var Invariants = []invariant.Invariant{
	{
		ID:      "LOCK-I1",
		Module:  "lease",
		Chapter: Chapter,
		Statement: "fences per lease name strictly increase across acquisitions (lease_grant in grant order), " +
			"and each lease row carries the fence of its latest grant",
		// Grant order is id order: grants of one name serialise on the
		// lease row's lock, so the later grant draws its id after the
		// earlier one committed.
		SQL: `
SELECT name, id AS grant_id, fence, previous_fence, 'fence did not increase' AS problem
  FROM (SELECT name, id, fence,
               lag(fence) OVER (PARTITION BY name ORDER BY id) AS previous_fence
          FROM lease_grant) g
 WHERE fence <= previous_fence
UNION ALL
SELECT l.name, NULL, l.fence, max(g.fence), 'lease fence is not its latest grant'
  FROM lease l
  LEFT JOIN lease_grant g ON g.name = l.name
 GROUP BY l.name, l.fence
HAVING l.fence IS DISTINCT FROM max(g.fence)`,
	},
}
