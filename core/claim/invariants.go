package claim

import "github.com/fencelab/fencelab/core/invariant"

// The claim engine's invariants (chapter 2, claim). Events written by a
// writer whose fence was already stale (rejected_stale, heartbeat_lost)
// record the old fence on purpose; the monotonicity checks skip them.
//
// Finished jobs live in job_history (migration 0614): CLAIM-I2 reads both
// tables through job_all, CLAIM-I4 reads the succeeded jobs in the history.
var Invariants = []invariant.Invariant{

	{
		ID: "CLAIM-I1", Module: "claim", Chapter: "claim",
		Statement: "a running job has an owner, a fence and a lease",
		SQL: `SELECT id, kind, owner, fence, lease_until FROM job
			      WHERE state = 'running' AND (owner IS NULL OR fence < 1 OR lease_until IS NULL)`,
	},
	{
		ID: "CLAIM-I2", Module: "claim", Chapter: "claim",
		Statement: "fences never decrease: each job's events carry non-decreasing fences, none above the job's",
		SQL: `SELECT e.job_id, e.id AS event_id, e.event, e.fence, e.prev_fence, j.fence AS job_fence
			      FROM (SELECT job_id, id, event, fence,
			                   lag(fence) OVER (PARTITION BY job_id ORDER BY id) AS prev_fence
			            FROM job_event
			            WHERE event NOT IN ('rejected_stale', 'heartbeat_lost')) e
			      LEFT JOIN job_all j ON j.id = e.job_id
			      WHERE e.fence < e.prev_fence OR j.id IS NULL OR e.fence > j.fence`,
	},
	{
		ID: "CLAIM-I3", Module: "claim", Chapter: "claim",
		Statement: "at most one claimed event per (job, fence)",
		SQL: `SELECT job_id, fence, count(*) AS claims FROM job_event
			      WHERE event = 'claimed' GROUP BY job_id, fence HAVING count(*) > 1`,
	},
	{
		ID: "CLAIM-I4", Module: "claim", Chapter: "claim",
		Statement: "a succeeded job has exactly one completion event, carrying the job's fence and the highest fence granted before it",
		SQL: `SELECT j.id, j.fence AS job_fence, count(e.id) AS completions,
			             min(e.fence) AS min_completion_fence, max(e.fence) AS max_completion_fence,
			             max(e.granted) AS granted_before
			      FROM job_history j
			      LEFT JOIN LATERAL (
			          SELECT c.id, c.fence,
			                 (SELECT max(g.fence) FROM job_event g
			                  WHERE g.job_id = c.job_id AND g.id < c.id
			                    AND g.event IN ('claimed', 'recovered', 'resolving')) AS granted
			          FROM job_event c
			          WHERE c.job_id = j.id AND c.event IN ('succeeded', 'resolved_found')) e ON true
			      WHERE j.state = 'succeeded'
			      GROUP BY j.id, j.fence
			      HAVING count(e.id) <> 1 OR min(e.fence) <> j.fence OR max(e.fence) <> j.fence
			          OR bool_or(e.granted IS DISTINCT FROM e.fence)`,
	},
}
