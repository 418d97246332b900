package claim

// All of the claim engine's SQL. Every transition is one statement that
// re-checks what the writer must still hold (state, owner, fence, lease) in
// its WHERE clause and writes its job_event row in the same statement through
// a data-modifying CTE: the history can never disagree with the table, and a
// transition costs one round trip.
//
// Durations travel as bigint microseconds ($n * interval '1 microsecond') so
// the statements do not depend on driver interval encoding.

// NotifyChannel is the LISTEN/NOTIFY channel Enqueue signals so idle workers
// wake at once instead of polling tightly; the payload is the kind.
const NotifyChannel = "fencelab_claim"

const jobColumns = `id, kind, business_key, state, payload, due_at, created_at, updated_at,
	attempts, max_attempts, coalesce(owner, ''), fence, lease_until, coalesce(last_error, ''), result`

// sqlEnqueue inserts one job or returns the existing one for (kind,
// business_key). DO UPDATE (a no-op assignment) rather than DO NOTHING so the
// existing row is returned even when a concurrent enqueue committed it after
// this statement's snapshot; xmax = 0 tells a fresh insert. A job due now
// notifies NotifyChannel; the notification is delivered when the caller's
// transaction commits, never before the row is visible.
const sqlEnqueue = `
WITH ins AS (
    INSERT INTO job (kind, business_key, payload, due_at, max_attempts)
    VALUES ($1, $2, $3::jsonb, coalesce($4::timestamptz, now()), $5)
    ON CONFLICT (kind, business_key) DO UPDATE SET kind = EXCLUDED.kind
    RETURNING id, (xmax = 0) AS created, due_at
)
SELECT ins.id, ins.created
FROM ins
LEFT JOIN LATERAL (
    SELECT pg_notify('` + NotifyChannel + `', $1) WHERE ins.created AND ins.due_at <= now()
) AS wake ON true`

// sqlEnqueueMany inserts many jobs of one statement; duplicates are skipped.
const sqlEnqueueMany = `
WITH ins AS (
    INSERT INTO job (kind, business_key, payload, due_at, max_attempts)
    SELECT k, b, p::jsonb, coalesce(d, now()), m
    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[]) AS i(k, b, p, d, m)
    ON CONFLICT (kind, business_key) DO NOTHING
    RETURNING kind
)
SELECT count(*), (SELECT count(*) FROM (SELECT pg_notify('` + NotifyChannel + `', kind) FROM (SELECT DISTINCT kind FROM ins) k) n)
FROM ins`

// sqlClaim is chapter 2's claim in one statement: candidates in (due_at,
// created_at) order, locked with SKIP LOCKED so racing claimers pass over each
// other's rows instead of waiting or double-claiming, then made running with
// a new owner, fence+1, attempts+1 and a lease, and a claimed event per job
// (CLAIM-I3: the unique index allows one claimed event per (job, fence)).
// The statement commits before any handler runs: no lock spans a tool call.
// The picked rows are updated through their keys as an array (= ANY
// (ARRAY(…))): a primary-key probe per row. Joined to picked instead, the
// prepared statement's generic plan (LIMIT @limit unknown) hashed a sequential
// scan of the whole job table, finished history included, on every claim.
//
// (@after_due, @after_created, @after_id) is where the scan starts: job_ready_idx's order after that
// (due_at, created_at, id). A claim leaves its rows' entries dead in
// job_ready_idx — dead until VACUUM, which the table's size spaces out:
// autovacuum waits for a share of the table, finished history included,
// to be dead, so beside 5M finished jobs some 100,000 dead entries pile
// up at the head of the index, and a scan from the head walks all of
// them on every claim. The worker pool (scanHint) starts after the
// furthest row it has claimed instead, and from the head (the floor,
// scanFromHead) when a claim comes back short or a second has passed,
// so a ready row behind it — one whose claimer rolled back, or whose
// enqueue committed after a later row was claimed — still waits at most
// that long. Fairness is unchanged in kind: SKIP LOCKED is not fair
// either.
const sqlClaim = `
WITH picked AS (
    SELECT id
    FROM job
    WHERE state = 'ready' AND due_at <= now() AND kind = ANY(@kinds::text[])
      AND (due_at, created_at, id) > (@after_due::timestamptz, @after_created::timestamptz, @after_id::bigint)
    ORDER BY due_at, created_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE job
    SET state = 'running', owner = @owner, fence = job.fence + 1, attempts = job.attempts + 1,
        lease_until = now() + @lease_us::bigint * interval '1 microsecond', updated_at = now()
    WHERE job.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING ` + jobColumns + `
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state)
    SELECT id, 'claimed', fence, @owner, 'running' FROM claimed
)
SELECT * FROM claimed`

// sqlComplete finishes many held jobs at once: one UPDATE over the ids in
// $1 that matches only rows still running under this owner and the fence
// $2 gives for that id, with an unexpired lease. Rows that no longer match
// lost their fence: they are left untouched and, when $5, get a
// rejected_stale event in the same statement (CompleteTx records them
// outside the caller's transaction instead, so the record survives its
// rollback).
//
// $2 is a jsonb object {"<id>": [fence, position of the id's result in
// $3]} built by completeArgs from integers only. Each row finds its fence
// and result by a binary search of the object's keys: no join, and no
// linear array_position either (that made a batch of n completions cost
// n² comparisons: a 1,000-job batch spent tens of milliseconds in it). A
// join of the ids' unnest is not used because a queue's statistics always
// lag (the running set was empty at the last ANALYZE), and a join planned
// on "one running row" turns into a nested loop of batch × batch
// comparisons. The rows themselves come from the primary key (id = ANY):
// the state test is written "(job.state = 'running') IS TRUE" — the same
// test, state being NOT NULL — because the planner cannot prove a partial
// index's predicate from it. Written plainly, it lets the stale estimate
// of the running set pick job_running_lease_idx and filter every running
// job of every process against the batch (running × batch); through the
// primary key a batch of n costs n probes however many jobs are running.
const sqlComplete = `
WITH done AS (
    UPDATE job
    SET state = 'succeeded', lease_until = NULL, updated_at = now(),
        result = ($3::text[])[($2::jsonb -> job.id::text ->> 1)::int]::jsonb
    WHERE job.id = ANY($1::bigint[])
      AND job.fence = ($2::jsonb -> job.id::text ->> 0)::bigint
      AND job.owner = $4 AND (job.state = 'running') IS TRUE AND job.lease_until > now()
    RETURNING job.id, job.kind, job.fence
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state)
    SELECT id, 'succeeded', fence, $4, 'succeeded' FROM done
    UNION ALL
    SELECT i.id, 'rejected_stale', ($2::jsonb -> i.id::text ->> 0)::bigint, $4, job.state
    FROM unnest($1::bigint[]) AS i(id)
    LEFT JOIN job ON job.id = i.id
    WHERE $5::bool AND i.id NOT IN (SELECT id FROM done)
)
SELECT id, kind FROM done`

// sqlFail ends a held attempt with an error: back to ready with due_at
// pushed out by the backoff (@delay_us), or failed when the error is permanent (@permanent)
// or the durable attempt budget is spent. attempts is never reset, so a
// job that keeps failing cannot retry forever.
const sqlFail = `
WITH upd AS (
    UPDATE job
    SET state       = CASE WHEN @permanent::bool OR attempts >= max_attempts THEN 'failed' ELSE 'ready' END,
        due_at      = CASE WHEN @permanent::bool OR attempts >= max_attempts THEN due_at
                           ELSE now() + @delay_us::bigint * interval '1 microsecond' END,
        owner       = CASE WHEN @permanent::bool OR attempts >= max_attempts THEN owner END,
        lease_until = NULL, last_error = @error, updated_at = now()
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'running' AND lease_until > now()
    RETURNING id, fence, state
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, CASE WHEN state = 'failed' THEN 'failed' ELSE 'retry_scheduled' END, fence, @owner, state, @error FROM upd
    UNION ALL
    SELECT @id, 'rejected_stale', @fence, @owner, (SELECT state FROM job WHERE id = @id), 'fail: ' || @error
    WHERE @record_stale::bool AND NOT EXISTS (SELECT 1 FROM upd)
)
SELECT state FROM upd`

// sqlMarkUnknown: the handler cannot tell whether its external effect
// happened. The job is released (no owner, no lease) and left for the
// resolver at due_at, spread by jitter (@delay_us).
const sqlMarkUnknown = `
WITH upd AS (
    UPDATE job
    SET state = 'unknown', owner = NULL, lease_until = NULL, last_error = @error,
        due_at = now() + @delay_us::bigint * interval '1 microsecond', updated_at = now()
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'running' AND lease_until > now()
    RETURNING id, fence
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, 'unknown', fence, @owner, 'unknown', @error FROM upd
    UNION ALL
    SELECT @id, 'rejected_stale', @fence, @owner, (SELECT state FROM job WHERE id = @id), 'unknown: ' || @error
    WHERE @record_stale::bool AND NOT EXISTS (SELECT 1 FROM upd)
)
SELECT id FROM upd`

// sqlRejectStale records a refused write outside the writer's transaction.
const sqlRejectStale = `
INSERT INTO job_event (job_id, event, fence, owner, state, detail)
SELECT $1, 'rejected_stale', $2, $3, (SELECT state FROM job WHERE id = $1), $4`

// sqlHeartbeat extends the leases of many held jobs and returns the ones
// that are lost: gone, fence raised by another actor, or lease already
// expired (an expired lease is never extended: once RecoverExpired may have
// seen it, it is gone). A heartbeat_lost event is written for each and the
// caller cancels their handlers. A row that was not renewed for another
// reason — this holder finished it (same fence, no longer running), or a
// concurrent write changed it after this statement's snapshot — is not
// judged here; the next heartbeat sees its current version. (The lost CTE
// reads the snapshot, so only facts that cannot be undone count: a raised
// fence or an expired running lease.) $5 is {"<id>": fence} for the
// update's per-row lookup, and the state test is written as in
// sqlComplete so the rows come from the primary key (see there).
const sqlHeartbeat = `
WITH renewed AS (
    UPDATE job
    SET lease_until = now() + $4::bigint * interval '1 microsecond'
    WHERE job.id = ANY($1::bigint[])
      AND job.fence = ($5::jsonb ->> job.id::text)::bigint
      AND job.owner = $3 AND (job.state = 'running') IS TRUE AND job.lease_until > now()
    RETURNING job.id
),
lost AS (
    SELECT i.id, i.fence, job.state
    FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
    LEFT JOIN job ON job.id = i.id
    WHERE i.id NOT IN (SELECT id FROM renewed)
      AND (job.id IS NULL OR job.fence <> i.fence
           OR (job.state = 'running' AND job.lease_until <= now()))
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state)
    SELECT id, 'heartbeat_lost', fence, $3, state FROM lost
)
SELECT id FROM lost`

// sqlRecoverExpired reclaims up to $1 running jobs whose lease expired.
// SKIP LOCKED lets several recoverers (and claimers) run at once: each row is
// taken by exactly one of them, and the state re-check makes a second pass
// find nothing. The fence is raised so the old owner's late writes are
// refused; kinds known to be safe to re-run ($2) go back to ready, every
// other kind to unknown (its effect may have happened). The re-dispatch is
// spread over up to $3 µs so a crash of many workers does not come back as
// one burst.
const sqlRecoverExpired = `
WITH expired AS (
    SELECT id, owner AS old_owner
    FROM job
    WHERE state = 'running' AND lease_until < now()
    ORDER BY lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
rec AS (
    UPDATE job
    SET state = CASE WHEN job.kind = ANY($2::text[]) THEN 'ready' ELSE 'unknown' END,
        fence = job.fence + 1, owner = NULL, lease_until = NULL,
        due_at = now() + floor(random() * $3::bigint) * interval '1 microsecond',
        last_error = 'lease expired', updated_at = now()
    FROM expired
    WHERE job.id = expired.id
      AND job.id = ANY (ARRAY(SELECT id FROM expired)) -- primary-key probes (see sqlClaim)
    RETURNING job.id, job.kind, job.fence, job.state, expired.old_owner
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, 'recovered', fence, $4, state, 'lease of ' || old_owner || ' expired' FROM rec
)
SELECT id, kind, fence, state FROM rec`

// sqlTakeUnknown gives a resolver up to $1 unknown jobs to settle: the fence
// is raised and a short lease marks the job as being checked, so two
// resolvers never settle one job and a resolver that dies is replaced once
// its lease lapses. The job stays unknown meanwhile.
const sqlTakeUnknown = `
WITH picked AS (
    SELECT id
    FROM job
    WHERE state = 'unknown' AND due_at <= now() AND (lease_until IS NULL OR lease_until < now())
    ORDER BY due_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
taken AS (
    UPDATE job
    SET fence = job.fence + 1, owner = $2, lease_until = now() + $3::bigint * interval '1 microsecond',
        updated_at = now()
    WHERE job.id = ANY (ARRAY(SELECT id FROM picked)) -- primary-key probes (see sqlClaim)
    RETURNING ` + jobColumns + `
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state)
    SELECT id, 'resolving', fence, $2, 'unknown' FROM taken
)
SELECT * FROM taken`

// sqlSettleUnknown applies a resolution, fenced like every other write:
// found → succeeded; absent → ready for a new claim (failed when the
// attempt budget is spent); cannot tell → needs_review.
const sqlSettleUnknown = `
WITH upd AS (
    UPDATE job
    SET state       = CASE @verdict::text WHEN 'found' THEN 'succeeded'
                                    WHEN 'absent' THEN CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'ready' END
                                    ELSE 'needs_review' END,
        result      = CASE WHEN @verdict::text = 'found' THEN @result::jsonb ELSE result END,
        last_error  = CASE WHEN @verdict::text = 'found' THEN last_error ELSE @detail END,
        owner       = CASE WHEN @verdict::text = 'absent' THEN NULL ELSE owner END,
        due_at      = CASE WHEN @verdict::text = 'absent' THEN now() ELSE due_at END,
        lease_until = NULL, updated_at = now()
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'unknown' AND lease_until > now()
    RETURNING id, fence, state
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, CASE @verdict::text WHEN 'found' THEN 'resolved_found' WHEN 'absent' THEN 'resolved_absent'
                             ELSE 'needs_review' END, fence, @owner, state, @detail FROM upd
    UNION ALL
    SELECT @id, 'rejected_stale', @fence, @owner, (SELECT state FROM job WHERE id = @id), 'resolve: ' || @verdict
    WHERE NOT EXISTS (SELECT 1 FROM upd)
)
SELECT state FROM upd`

// sqlCancel finishes a just-claimed job inside the claim transaction when
// its kind's OnClaim hook says it must not run.
const sqlCancel = `
WITH upd AS (
    UPDATE job
    SET state = 'cancelled', lease_until = NULL, last_error = $4, updated_at = now()
    WHERE id = $1 AND fence = $2 AND owner = $3 AND state = 'running'
    RETURNING id, fence
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, 'cancelled', fence, $3, 'cancelled', $4 FROM upd
)
SELECT id FROM upd`

const sqlGetJob = `SELECT ` + jobColumns + ` FROM job WHERE id = $1`

const sqlJobEvents = `
SELECT id, job_id, event, fence, coalesce(owner, ''), coalesce(state, ''), at, coalesce(detail, '')
FROM job_event WHERE job_id = $1 ORDER BY id LIMIT $2`

// Queue depth per kind and state of the live jobs (ready, running,
// unknown, needs_review), one state at a time, so that each branch reads
// its state's partial index (job_ready_idx, job_running_lease_idx,
// job_attention_idx): a scrape, or the console's queue page, costs the
// queue's size whatever the history. There is deliberately no index of
// all live jobs for it (0605 dropped job_live_idx): every enqueue and
// every claim inserted an entry into it, one index write per transition
// on the hottest path, to save a scrape a few heap reads. Terminal states
// are not gauged (they only grow until claim.purge):
// fencelab_claim_outcomes_total counts them. The age of the oldest due
// ready job per kind reads job_ready_idx, live too. SKIP LOCKED is not
// fair: this age is how starvation shows.
const sqlDepth = `
SELECT kind, state, count(*) FROM job WHERE state = 'ready' GROUP BY kind, state
UNION ALL
SELECT kind, state, count(*) FROM job WHERE state = 'running' GROUP BY kind, state
UNION ALL
SELECT kind, state, count(*) FROM job WHERE state = 'unknown' GROUP BY kind, state
UNION ALL
SELECT kind, state, count(*) FROM job WHERE state = 'needs_review' GROUP BY kind, state`

const sqlOldestReady = `
SELECT kind, extract(epoch FROM now() - min(due_at))::float8
FROM job
WHERE state = 'ready' AND due_at <= now()
GROUP BY kind`

// sqlDecide applies a person's verdict to a job in needs_review (see
// Client.DecideTx). The state re-check is the whole guard: needs_review is
// terminal for every automatic actor (no fenced write matches it), so the
// fence is not raised — the next claim raises it for a retry — and of two
// people deciding at once, one matches and the other finds nothing.
// The event reuses the resolver's names, the deciding person in owner:
// succeeded → resolved_found, retry → resolved_absent, failed → failed.
// A retry is granted at least one more attempt and wakes idle workers.
const sqlDecide = `
WITH upd AS (
    UPDATE job
    SET state        = CASE $2::text WHEN 'succeeded' THEN 'succeeded' WHEN 'retry' THEN 'ready' ELSE 'failed' END,
        result       = CASE WHEN $2::text = 'succeeded' THEN coalesce($4::jsonb, result) ELSE result END,
        last_error   = CASE WHEN $2::text = 'succeeded' THEN last_error ELSE $3 END,
        owner        = CASE WHEN $2::text = 'retry' THEN NULL ELSE owner END,
        due_at       = CASE WHEN $2::text = 'retry' THEN now() ELSE due_at END,
        max_attempts = CASE WHEN $2::text = 'retry' THEN greatest(max_attempts, attempts + 1) ELSE max_attempts END,
        lease_until  = NULL, updated_at = now()
    WHERE id = $1 AND state = 'needs_review'
    RETURNING ` + jobColumns + `
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, CASE $2::text WHEN 'succeeded' THEN 'resolved_found' WHEN 'retry' THEN 'resolved_absent' ELSE 'failed' END,
           fence, $5, state, $3
    FROM upd
)
SELECT upd.* FROM upd
LEFT JOIN LATERAL (SELECT pg_notify('` + NotifyChannel + `', upd.kind) WHERE $2::text = 'retry') AS wake ON true`

// finishedStates are the terminal states the retention purge deletes
// (job_finished_idx's predicate: keep the two in step). needs_review is
// not one of them: it waits for a person.
const finishedStates = `('succeeded', 'failed', 'cancelled')`

// sqlPurgeFinished deletes up to $2 jobs that finished more than $1
// microseconds ago by the database clock, with their job_event history in
// the same statement (CLAIM-I2..I4 never see half a job). Kinds in $3 are
// kept: a module's rows point at their jobs (a notification's task, an
// uploaded file) and the module's own retention removes them.
//
// The distinct kinds come from a loose index scan of job_finished_idx
// (one probe per kind), and each kind is one index range in updated_at
// order that stops at the cutoff: a batch examines the rows it deletes
// (plus one probe per kind), never the history it keeps. SKIP LOCKED lets
// two purges (two slots overlapping after a stall) split the work. The
// deletes take their keys as arrays (= ANY (ARRAY(…))): a primary-key
// probe per row whatever the planner guesses of the CTE's size, never a
// hash join over the table.
const sqlPurgeFinished = `
WITH RECURSIVE kinds AS (
    (SELECT kind FROM job WHERE state IN ` + finishedStates + ` ORDER BY kind LIMIT 1)
    UNION ALL
    SELECT (SELECT j.kind FROM job j
             WHERE j.state IN ` + finishedStates + ` AND j.kind > k.kind
             ORDER BY j.kind LIMIT 1)
      FROM kinds k WHERE k.kind IS NOT NULL
), doomed AS (
    SELECT d.id
      FROM kinds k
     CROSS JOIN LATERAL (
           SELECT j.id FROM job j
            WHERE j.kind = k.kind AND j.state IN ` + finishedStates + `
              AND j.updated_at < now() - $1::bigint * interval '1 microsecond'
            ORDER BY j.updated_at
            LIMIT $2
              FOR UPDATE SKIP LOCKED) d
     WHERE k.kind IS NOT NULL AND k.kind <> ALL ($3::text[])
     LIMIT $2
), gone AS (
    DELETE FROM job WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id
), history AS (
    DELETE FROM job_event WHERE job_id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT count(*) FROM gone`
