package notify

import "github.com/fencelab/fencelab/core/invariant"

const chapter = "notifications"

// The invariants of chapter 11 ("Notifications"). A task's state, fence and
// history live in its claim job (job, job_event); the checks join them to
// the module's tables. The claim engine's own invariants (CLAIM-I1..I4)
// hold for the same jobs.
var Invariants = []invariant.Invariant{

	{
		ID: "NTF-I1", Module: "notify", Chapter: chapter,
		Statement: "one (user_id, submitted_by, event_key) makes one logical notification, however many submissions and however concurrent; a service's event_key is its own",
		SQL: `
SELECT 'more than one notification for one (user, service, event)' AS problem,
       user_id || ' ' || submitted_by || ' ' || event_key AS detail, count(*)::text AS n
  FROM notify_notification GROUP BY user_id, submitted_by, event_key HAVING count(*) > 1`,
	},
	{
		ID: "NTF-I2", Module: "notify", Chapter: chapter,
		Statement: "at most one task per (notification, channel); one token per task at a time; a superseded holder cannot change the task's state (its already-sent call cannot be recalled)",
		SQL: `
SELECT 'more than one task for one (notification, channel)' AS problem, notification_id || '/' || channel AS detail, count(*)::text AS n
  FROM notify_task GROUP BY notification_id, channel HAVING count(*) > 1
UNION ALL
SELECT 'task not driven by its own job', t.id::text, coalesce(j.kind || ' ' || j.business_key, 'no job')
  FROM notify_task t LEFT JOIN job_all j ON j.id = t.job_id
 WHERE j.id IS NULL OR j.kind <> 'notify.' || t.channel OR j.business_key <> t.delivery_key
UNION ALL
SELECT 'delivery job without a task', j.id::text, j.business_key
  FROM job_all j
 WHERE j.kind IN ('notify.email', 'notify.sms', 'notify.push')
   AND NOT EXISTS (SELECT 1 FROM notify_task t WHERE t.job_id = j.id)
UNION ALL
SELECT 'call made under a token the job never granted', a.task_id || '#' || a.attempt_no, a.op || ' fence ' || a.fence || ' by ' || a.worker
  FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id
 WHERE NOT EXISTS (SELECT 1 FROM job_event e
                    WHERE e.job_id = t.job_id AND e.fence = a.fence AND e.owner = a.worker
                      AND e.event = CASE a.op WHEN 'send' THEN 'claimed' ELSE 'resolving' END)
UNION ALL
SELECT 'more than one send under one token', task_id::text, 'fence ' || fence || ': ' || count(*) || ' sends'
  FROM notify_attempt WHERE op = 'send' GROUP BY task_id, fence HAVING count(*) > 1
UNION ALL
SELECT 'task state changed by a superseded holder', t.id::text, e.event || ' at fence ' || e.fence || ' after grant ' || g.fence
  FROM job_event e
  JOIN notify_task t ON t.job_id = e.job_id
  CROSS JOIN LATERAL (SELECT max(x.fence) AS fence FROM job_event x
                       WHERE x.job_id = e.job_id AND x.id < e.id AND x.event IN ('claimed', 'recovered', 'resolving')) g
 WHERE e.event IN ('succeeded', 'retry_scheduled', 'failed', 'unknown', 'cancelled',
                   'resolved_found', 'resolved_absent', 'needs_review')
   AND e.fence IS DISTINCT FROM g.fence`,
	},
	{
		ID: "NTF-I3", Module: "notify", Chapter: chapter,
		Statement: "every channel call leaves a delivery-attempt row; unknown attempts stay queryable and are never overwritten by later results (append-only)",
		// Request counts at the channels are the ground truth the
		// experiments compare with these rows; what SQL can see is that
		// rows are only ever added and finished once, and that nothing
		// was delivered without a recorded call (or a person) saying so.
		SQL: `
SELECT 'attempt numbers have a gap: a row was removed' AS problem, task_id::text AS detail, max(attempt_no) || ' numbers, ' || count(*) || ' rows' AS n
  FROM notify_attempt GROUP BY task_id HAVING max(attempt_no) <> count(*)
UNION ALL
SELECT 'delivered without a recorded call under that token saying so', t.id::text, e.event || ' at fence ' || e.fence
  FROM job_event e JOIN notify_task t ON t.job_id = e.job_id
 WHERE e.event IN ('succeeded', 'resolved_found')
   AND NOT EXISTS (SELECT 1 FROM notify_attempt a
                    WHERE a.task_id = t.id AND a.fence = e.fence AND a.outcome = 'success' AND a.effect_id IS NOT NULL)
   AND NOT EXISTS (SELECT 1 FROM notify_review_decision d
                    WHERE d.task_id = t.id AND d.action = 'delivered' AND d.job_fence = e.fence
                      AND e.owner = 'review:' || d.decided_by)`,
	},
	{
		ID: "NTF-I4", Module: "notify", Chapter: chapter,
		Statement: "retry after a timeout follows the channel's capability: idempotency key → resend with the same key; query only → query first, resend only on an authoritative absent; neither → stop, needs_review",
		// "May have delivered": a send whose outcome is success, unknown
		// or pending. sms and push are the channels without keys.
		SQL: `
SELECT 'call without the task''s key' AS problem, a.task_id || '#' || a.attempt_no AS detail, a.key_sent AS n
  FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id
 WHERE a.key_sent <> t.delivery_key
UNION ALL
SELECT 'resent without an authoritative absent or a person''s decision', s2.task_id || '#' || s2.attempt_no,
       t.channel || ' after #' || s1.attempt_no || ' (' || s1.outcome || ')'
  FROM notify_attempt s2
  JOIN notify_task t ON t.id = s2.task_id AND t.channel IN ('sms', 'push')
  JOIN notify_attempt s1 ON s1.task_id = s2.task_id AND s1.op = 'send' AND s1.attempt_no < s2.attempt_no
                         AND s1.outcome IN ('pending', 'unknown', 'success')
 WHERE s2.op = 'send'
   AND NOT EXISTS (SELECT 1 FROM notify_attempt q
                    WHERE q.task_id = s1.task_id AND q.op = 'query' AND q.outcome = 'success' AND q.effect_id IS NULL
                      AND q.attempt_no > s1.attempt_no AND q.attempt_no < s2.attempt_no)
   AND NOT EXISTS (SELECT 1 FROM notify_review_decision d
                    WHERE d.task_id = s1.task_id AND d.action = 'resend'
                      AND d.decided_at > s1.started_at AND d.decided_at < s2.started_at)
UNION ALL
SELECT 'failed although a send may have delivered', t.id::text, t.channel || ' #' || s.attempt_no || ' (' || s.outcome || ')'
  FROM notify_task t
  JOIN job_all j ON j.id = t.job_id AND j.state = 'failed'
  JOIN notify_attempt s ON s.task_id = t.id AND s.op = 'send' AND s.outcome IN ('pending', 'unknown', 'success')
 WHERE NOT EXISTS (SELECT 1 FROM notify_attempt q
                    WHERE q.task_id = s.task_id AND q.op = 'query' AND q.outcome = 'success' AND q.effect_id IS NULL
                      AND q.attempt_no > s.attempt_no)
   AND NOT EXISTS (SELECT 1 FROM notify_review_decision d WHERE d.task_id = t.id AND d.action = 'give_up')
UNION ALL
SELECT 'a channel without a lookup was queried', a.task_id || '#' || a.attempt_no, t.channel
  FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id
 WHERE a.op = 'query' AND t.channel <> 'sms'`,
	},
	{
		ID: "NTF-I5", Module: "notify", Chapter: chapter,
		Statement: "a preference turned off before the claim cancels the task at claim time (checked in the claim transaction), never sends",
		SQL: `
SELECT 'sent under or after the claim that cancelled it' AS problem, t.id::text AS detail, 'send #' || a.attempt_no || ' at fence ' || a.fence AS n
  FROM notify_task t
  JOIN job_event e ON e.job_id = t.job_id AND e.event = 'cancelled'
  JOIN notify_attempt a ON a.task_id = t.id AND a.op = 'send' AND a.fence >= e.fence
UNION ALL
SELECT 'cancelled other than by the claim-time preference check', t.id::text, coalesce(j.last_error, '')
  FROM notify_task t JOIN job_all j ON j.id = t.job_id
 WHERE j.state = 'cancelled' AND coalesce(j.last_error, '') NOT LIKE 'NTF-I5:%'
UNION ALL
SELECT 'cancelled at a claim that was never made', t.id::text, 'fence ' || e.fence
  FROM notify_task t JOIN job_event e ON e.job_id = t.job_id AND e.event = 'cancelled'
 WHERE NOT EXISTS (SELECT 1 FROM job_event c WHERE c.job_id = e.job_id AND c.event = 'claimed' AND c.fence = e.fence)`,
	},
	{
		ID: "NTF-S1", Module: "notify", Chapter: chapter, Schema: true,
		Statement: "the notify schema keeps its guards: the unique (user_id, submitted_by, event_key) behind NTF-I1 and the append-only triggers behind NTF-I3",
		SQL: `
SELECT 'the unique constraint on (user_id, submitted_by, event_key) is missing' AS problem, 'notify_notification_one_per_event' AS detail
 WHERE NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'notify_notification'::regclass AND conname = 'notify_notification_one_per_event'
                      AND contype = 'u'
                      AND pg_get_constraintdef(oid) = 'UNIQUE (user_id, submitted_by, event_key)')
UNION ALL
SELECT 'notify_attempt is not append-only: trigger missing or disabled', 'notify_attempt_append_only'
 WHERE NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'notify_attempt'::regclass
                      AND tgname = 'notify_attempt_append_only' AND tgenabled <> 'D')
UNION ALL
SELECT 'notify_review_decision is not append-only: trigger missing or disabled', 'notify_review_decision_append_only'
 WHERE NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'notify_review_decision'::regclass
                      AND tgname = 'notify_review_decision_append_only' AND tgenabled <> 'D')`,
	},
}
