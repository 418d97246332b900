package claim

// All of the claim engine's SQL. Every transition is one statement that
// re-checks what the writer must still hold (state, owner, fence, lease) in
// its WHERE clause and writes its job_event row in the same statement through
// a data-modifying CTE: the history can never disagree with the table, and a
// transition costs one round trip.
//
// The live queue (ready, running, unknown, needs_review) is the table
// job; a transition that finishes a job (succeeded, failed, cancelled)
// moves its row to job_history in the same statement — DELETE … RETURNING
// feeding an INSERT — so claims, their vacuum and their indexes never walk
// the finished history (migration 0614; docs/chapters/claim.md). Reads of
// a job by id read job_all, the two together.
//
// Durations travel as bigint microseconds ($n * interval '1 microsecond') so
// the statements do not depend on driver interval encoding.

// NotifyChannel is the LISTEN/NOTIFY channel Enqueue signals so idle workers
// wake at once instead of polling tightly; the payload is the kind.
const NotifyChannel = "fencelab_claim"

const jobColumns = `id, kind, business_key, state, payload, due_at, created_at, updated_at,
	attempts, max_attempts, coalesce(owner, ''), fence, lease_until, coalesce(last_error, ''), result`

// historyColumns are job_history's columns in job's order: a move is
// INSERT INTO job_history (historyColumns) SELECT … FROM the DELETE's rows.
const historyColumns = `id, kind, business_key, state, payload, due_at, created_at, updated_at,
	attempts, max_attempts, owner, fence, lease_until, last_error, result`

// sqlEnqueue inserts one job or returns the existing one for (kind,
// business_key), live or finished: the key's row in job_key (migration
// 0615) names its job until claim.purge deletes the job's history, so a
// key whose job finished returns that job (created false) as it did when
// finished jobs stayed in job. The key is registered and the job inserted
// in one statement, under a fresh id from job's sequence; a repeat never
// touches the job's row, so it neither waits on nor races with a claim or
// completion of it. DO UPDATE (a no-op assignment) rather than DO NOTHING
// so the existing key is returned even when a concurrent enqueue
// committed it after this statement's snapshot; xmax = 0 tells a fresh
// insert. A job due now notifies NotifyChannel; the notification is
// delivered when the caller's transaction commits, never before the row
// is visible.
const sqlEnqueue = `
WITH k AS (
    INSERT INTO job_key (kind, business_key, job_id)
    VALUES ($1, $2, nextval('job_id_seq'))
    ON CONFLICT (kind, business_key) DO UPDATE SET kind = EXCLUDED.kind
    RETURNING job_id, (xmax = 0) AS created
), ins AS (
    INSERT INTO job (id, kind, business_key, payload, due_at, max_attempts)
    SELECT job_id, $1, $2, $3::jsonb, coalesce($4::timestamptz, now()), $5 FROM k WHERE created
)
SELECT k.job_id, k.created
FROM k
LEFT JOIN LATERAL (
    SELECT pg_notify('` + NotifyChannel + `', $1) WHERE k.created AND coalesce($4::timestamptz, now()) <= now()
) AS wake ON true`

// sqlEnqueueMany inserts many jobs of one statement; keys already
// registered (live or finished jobs, see sqlEnqueue) are skipped, and of a
// key given twice the first is taken.
const sqlEnqueueMany = `
WITH given AS (
    SELECT DISTINCT ON (k, b) k, b, p, d, m
    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[]) WITH ORDINALITY AS i(k, b, p, d, m, n)
    ORDER BY k, b, n
), keyed AS (
    INSERT INTO job_key (kind, business_key, job_id)
    SELECT k, b, nextval('job_id_seq') FROM given
    ON CONFLICT (kind, business_key) DO NOTHING
    RETURNING kind, business_key, job_id
), ins AS (
    INSERT INTO job (id, kind, business_key, payload, due_at, max_attempts)
    SELECT keyed.job_id, g.k, g.b, g.p::jsonb, coalesce(g.d, now()), g.m
    FROM keyed JOIN given g ON g.k = keyed.kind AND g.b = keyed.business_key
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
//
// The scan's LIMIT is @bucket, a power of two at least @limit written into
// the text as a literal (claimStmt), and @limit cuts what the update takes
// from picked. A LIMIT the planner cannot see is planned as a tenth of the
// ready rows, so the prepared statement's generic plan sorted the whole
// ready set, and PostgreSQL kept planning the claim afresh instead: 170 µs
// a claim, an eighth of the database's time at 100 workers. With the
// bucket in the text the generic plan is the custom one, made once per
// connection and bucket. picked is not inlined (a CTE that locks rows never
// is) and runs only as far as it is read: the update's LIMIT @limit pulls
// @limit rows, so only those are locked.
const sqlClaim = `
WITH picked AS (
    SELECT id
    FROM job
    WHERE state = 'ready' AND due_at <= now() AND kind = ANY(@kinds::text[])
      AND (due_at, created_at, id) > (@after_due::timestamptz, @after_created::timestamptz, @after_id::bigint)
    ORDER BY due_at, created_at, id
    LIMIT @bucket
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE job
    SET state = 'running', owner = @owner, fence = job.fence + 1, attempts = job.attempts + 1,
        lease_until = now() + @lease_us::bigint * interval '1 microsecond', updated_at = now()
    WHERE job.id = ANY (ARRAY(SELECT id FROM picked LIMIT @limit))
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
// comparisons. The finished rows move to job_history (see the top of this
// file): a completion writes the history row's two index entries where
// the in-place update wrote three (job_pkey, the unique key and the
// finished index), and leaves job a dead tuple that pruning reclaims.
// A stale id's state is read from job_all per id (LATERAL … LIMIT 1),
// never by a join the planner could hash over the history.
// The rows themselves come from the primary key (id = ANY):
// the state test is written "(job.state = 'running') IS TRUE" — the same
// test, state being NOT NULL — because the planner cannot prove a partial
// index's predicate from it. Written plainly, it lets the stale estimate
// of the running set pick job_running_lease_idx and filter every running
// job of every process against the batch (running × batch); through the
// primary key a batch of n costs n probes however many jobs are running.
const sqlComplete = `
WITH done AS (
    DELETE FROM job
    WHERE job.id = ANY($1::bigint[])
      AND job.fence = ($2::jsonb -> job.id::text ->> 0)::bigint
      AND job.owner = $4 AND (job.state = 'running') IS TRUE AND job.lease_until > now()
    RETURNING ` + historyColumns + `
),
moved AS (
    INSERT INTO job_history (` + historyColumns + `)
    SELECT id, kind, business_key, 'succeeded', payload, due_at, created_at, now(),
           attempts, max_attempts, owner, fence, NULL, last_error,
           ($3::text[])[($2::jsonb -> id::text ->> 1)::int]::jsonb
    FROM done
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state)
    SELECT id, 'succeeded', fence, $4, 'succeeded' FROM done
    UNION ALL
    SELECT i.id, 'rejected_stale', ($2::jsonb -> i.id::text ->> 0)::bigint, $4, cur.state
    FROM unnest($1::bigint[]) AS i(id)
    LEFT JOIN LATERAL (SELECT a.state FROM job_all a WHERE a.id = i.id LIMIT 1) cur ON true
    WHERE $5::bool AND i.id NOT IN (SELECT id FROM done)
)
SELECT id FROM done`

// sqlFail ends a held attempt with an error: back to ready with due_at
// pushed out by the backoff (@delay_us), or failed when the error is permanent (@permanent)
// or the durable attempt budget is spent. attempts is never reset, so a
// job that keeps failing cannot retry forever.
//
// The retry stays in job (upd); the final failure moves the row to
// job_history (gone, then fin). The two WHERE clauses are the same guard
// split by the same test on the row's snapshot, so exactly one of them
// can match.
const sqlFail = `
WITH upd AS (
    UPDATE job
    SET state = 'ready', due_at = now() + @delay_us::bigint * interval '1 microsecond',
        owner = NULL, lease_until = NULL, last_error = @error, updated_at = now()
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'running' AND lease_until > now()
      AND NOT (@permanent::bool OR attempts >= max_attempts)
    RETURNING id, fence, state
),
gone AS (
    DELETE FROM job
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'running' AND lease_until > now()
      AND (@permanent::bool OR attempts >= max_attempts)
    RETURNING ` + historyColumns + `
),
fin AS (
    INSERT INTO job_history (` + historyColumns + `)
    SELECT id, kind, business_key, 'failed', payload, due_at, created_at, now(),
           attempts, max_attempts, owner, fence, NULL, @error, result
    FROM gone
    RETURNING id, fence, state
),
res AS (SELECT * FROM upd UNION ALL SELECT * FROM fin),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, CASE WHEN state = 'failed' THEN 'failed' ELSE 'retry_scheduled' END, fence, @owner, state, @error FROM res
    UNION ALL
    SELECT @id, 'rejected_stale', @fence, @owner, (SELECT state FROM job_all WHERE id = @id LIMIT 1), 'fail: ' || @error
    WHERE @record_stale::bool AND NOT EXISTS (SELECT 1 FROM res)
)
SELECT state FROM res`

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
    SELECT @id, 'rejected_stale', @fence, @owner, (SELECT state FROM job_all WHERE id = @id LIMIT 1), 'unknown: ' || @error
    WHERE @record_stale::bool AND NOT EXISTS (SELECT 1 FROM upd)
)
SELECT id FROM upd`

// sqlRejectStale records a refused write outside the writer's transaction.
const sqlRejectStale = `
INSERT INTO job_event (job_id, event, fence, owner, state, detail)
SELECT $1, 'rejected_stale', $2, $3, (SELECT state FROM job_all WHERE id = $1 LIMIT 1), $4`

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
// sqlComplete so the rows come from the primary key (see there). The
// lost rows' current versions come from job_all per id: a job this holder
// finished has moved to job_history with its fence, and is not lost.
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
    SELECT i.id, i.fence, cur.state
    FROM unnest($1::bigint[], $2::bigint[]) AS i(id, fence)
    LEFT JOIN LATERAL (SELECT a.state, a.fence, a.lease_until FROM job_all a WHERE a.id = i.id LIMIT 1) cur ON true
    WHERE i.id NOT IN (SELECT id FROM renewed)
      AND (cur.state IS NULL OR cur.fence <> i.fence
           OR (cur.state = 'running' AND cur.lease_until <= now()))
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
// A verdict that finishes the job (found, or absent with the budget spent)
// moves it to job_history (gone, fin); the others update it in place (upd).
const sqlSettleUnknown = `
WITH upd AS (
    UPDATE job
    SET state       = CASE WHEN @verdict::text = 'absent' THEN 'ready' ELSE 'needs_review' END,
        last_error  = @detail,
        owner       = CASE WHEN @verdict::text = 'absent' THEN NULL ELSE owner END,
        due_at      = CASE WHEN @verdict::text = 'absent' THEN now() ELSE due_at END,
        lease_until = NULL, updated_at = now()
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'unknown' AND lease_until > now()
      AND NOT (@verdict::text = 'found' OR (@verdict::text = 'absent' AND attempts >= max_attempts))
    RETURNING id, fence, state
),
gone AS (
    DELETE FROM job
    WHERE id = @id AND fence = @fence AND owner = @owner AND state = 'unknown' AND lease_until > now()
      AND (@verdict::text = 'found' OR (@verdict::text = 'absent' AND attempts >= max_attempts))
    RETURNING ` + historyColumns + `
),
fin AS (
    INSERT INTO job_history (` + historyColumns + `)
    SELECT id, kind, business_key, CASE WHEN @verdict::text = 'found' THEN 'succeeded' ELSE 'failed' END,
           payload, CASE WHEN @verdict::text = 'absent' THEN now() ELSE due_at END, created_at, now(),
           attempts, max_attempts, CASE WHEN @verdict::text = 'absent' THEN NULL ELSE owner END, fence, NULL,
           CASE WHEN @verdict::text = 'found' THEN last_error ELSE @detail END,
           CASE WHEN @verdict::text = 'found' THEN @result::jsonb ELSE result END
    FROM gone
    RETURNING id, fence, state
),
res AS (SELECT * FROM upd UNION ALL SELECT * FROM fin),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, CASE @verdict::text WHEN 'found' THEN 'resolved_found' WHEN 'absent' THEN 'resolved_absent'
                             ELSE 'needs_review' END, fence, @owner, state, @detail FROM res
    UNION ALL
    SELECT @id, 'rejected_stale', @fence, @owner, (SELECT state FROM job_all WHERE id = @id LIMIT 1), 'resolve: ' || @verdict
    WHERE NOT EXISTS (SELECT 1 FROM res)
)
SELECT state FROM res`

// sqlCancel finishes a just-claimed job inside the claim transaction when
// its kind's OnClaim hook says it must not run.
// The cancelled job moves to job_history.
const sqlCancel = `
WITH gone AS (
    DELETE FROM job
    WHERE id = $1 AND fence = $2 AND owner = $3 AND state = 'running'
    RETURNING ` + historyColumns + `
),
upd AS (
    INSERT INTO job_history (` + historyColumns + `)
    SELECT id, kind, business_key, 'cancelled', payload, due_at, created_at, now(),
           attempts, max_attempts, owner, fence, NULL, $4, result
    FROM gone
    RETURNING id, fence
),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, 'cancelled', fence, $3, 'cancelled', $4 FROM upd
)
SELECT id FROM upd`

const sqlGetJob = `SELECT ` + jobColumns + ` FROM job_all WHERE id = $1 LIMIT 1`

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
//
// A retry stays in job (retried); succeeded and failed move the job to
// job_history (gone, fin).
const sqlDecide = `
WITH retried AS (
    UPDATE job
    SET state = 'ready', last_error = $3, owner = NULL, due_at = now(),
        max_attempts = greatest(max_attempts, attempts + 1), lease_until = NULL, updated_at = now()
    WHERE id = $1 AND state = 'needs_review' AND $2::text = 'retry'
    RETURNING ` + jobColumns + `
),
gone AS (
    DELETE FROM job
    WHERE id = $1 AND state = 'needs_review' AND $2::text <> 'retry'
    RETURNING ` + historyColumns + `
),
fin AS (
    INSERT INTO job_history (` + historyColumns + `)
    SELECT id, kind, business_key, CASE $2::text WHEN 'succeeded' THEN 'succeeded' ELSE 'failed' END,
           payload, due_at, created_at, now(), attempts, max_attempts, owner, fence, NULL,
           CASE WHEN $2::text = 'succeeded' THEN last_error ELSE $3 END,
           CASE WHEN $2::text = 'succeeded' THEN coalesce($4::jsonb, result) ELSE result END
    FROM gone
    RETURNING ` + jobColumns + `
),
upd AS (SELECT * FROM retried UNION ALL SELECT * FROM fin),
ev AS (
    INSERT INTO job_event (job_id, event, fence, owner, state, detail)
    SELECT id, CASE $2::text WHEN 'succeeded' THEN 'resolved_found' WHEN 'retry' THEN 'resolved_absent' ELSE 'failed' END,
           fence, $5, state, $3
    FROM upd
)
SELECT upd.* FROM upd
LEFT JOIN LATERAL (SELECT pg_notify('` + NotifyChannel + `', upd.kind) WHERE $2::text = 'retry') AS wake ON true`

// finishedStates are the terminal states, which job_history holds
// (job_finished_idx's predicate: keep the two in step). needs_review is
// not one of them: it waits for a person.
const finishedStates = `('succeeded', 'failed', 'cancelled')`

// historyDayPrefix names a day partition of job_history_days:
// job_history_dYYYYMMDD holds the jobs that finished on that UTC day.
const historyDayPrefix = "job_history_d"

// sqlToday is the database's UTC day: the partitions follow the database
// clock, like every updated_at they hold.
const sqlToday = `SELECT (now() AT TIME ZONE 'UTC')::date::text`

// sqlCreateDay creates one day partition (name and bounds filled by
// createDay from a parsed date only). It scans the default partition for
// rows of that day: normally none, and it stays empty when days exist ahead.
const sqlCreateDay = `CREATE TABLE IF NOT EXISTS %s PARTITION OF job_history_days FOR VALUES FROM ('%s 00:00:00+00') TO ('%s 00:00:00+00')`

// sqlHistoryDays lists the day partitions by name (the catalog, not the rows).
const sqlHistoryDays = `
SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'job_history_days'::regclass AND c.relname::text LIKE '` + historyDayPrefix + `%'
 ORDER BY 1`

// sqlKeepDay moves a day's jobs of KeepFinished kinds ($1) to
// job_history_kept before the day is dropped: a module's rows point at
// them until the module deletes both (DeleteFinishedTx). The partition
// key changes, so each row moves; the range on updated_at prunes the scan
// to that day's partition.
const sqlKeepDay = `
UPDATE job_history SET kept = true
 WHERE NOT kept AND kind = ANY ($1::text[]) AND updated_at >= $2::timestamptz AND updated_at < $3::timestamptz`

// goneRows are the CTEs that delete the job_event history and the job_key
// key of the jobs whose ids the CTE "gone" holds, in the statement that
// deletes the jobs: CLAIM-I2..I4 never see half a job, and a key is free
// again once its job's history is gone. Both go by id, a probe each
// (job_event's primary key leads with job_id; job_key_job), so a purge
// costs its own jobs' rows, never the history's. Every statement that
// deletes finished jobs ends with it: sqlDayRows, sqlPurgeFinished and
// sqlDeleteFinished.
const goneRows = `history AS (
    DELETE FROM job_event WHERE job_id = ANY (ARRAY(SELECT id FROM gone))
), keys AS (
    DELETE FROM job_key WHERE job_id = ANY (ARRAY(SELECT id FROM gone))
)`

// sqlDayRows deletes the job_event and job_key rows of one day
// partition's jobs (%s: the partition's name; goneRows), in the
// transaction that drops it.
const sqlDayRows = `
WITH gone AS MATERIALIZED (SELECT id FROM %s), ` + goneRows + `
SELECT count(*) FROM gone`

const sqlDayCount = `SELECT count(*) FROM %s`

// sqlDropDay drops one expired day: a catalog change, whatever the day held.
const sqlDropDay = `DROP TABLE %s`

// sqlSweepLive moves up to $1 finished rows still in job to job_history:
// only a hand-written update leaves one there (the lab's naive versions
// write job directly); the engine's own transitions move the row. One
// range of job_finished_idx, empty but for those.
const sqlSweepLive = `
WITH gone AS (
    DELETE FROM job
     WHERE id = ANY (ARRAY(SELECT id FROM job WHERE state IN ` + finishedStates + `
                            ORDER BY kind, updated_at LIMIT $1 FOR UPDATE SKIP LOCKED))
       AND state IN ` + finishedStates + `
    RETURNING ` + historyColumns + `
), moved AS (
    INSERT INTO job_history (` + historyColumns + `) SELECT * FROM gone RETURNING id
)
SELECT count(*) FROM moved`

// sqlPurgeFinished deletes up to $2 jobs of the default partition that
// finished more than $1 microseconds ago by the database clock, with their
// job_event history and their keys in the same statement (goneRows). The
// default partition holds only the finishes of days that had no
// partition yet (the engine fell behind, or finished jobs moved in by
// 0614), so it is normally empty; this is the one batched purge left.
// Kinds in $3 are kept: a module's rows point at their jobs (a
// notification's task, an uploaded file) and the module's own retention
// removes them. One range of job_history_days_default_finished
// (updated_at), stopping at the cutoff.
const sqlPurgeFinished = `
WITH doomed AS (
    SELECT id FROM job_history_days_default
     WHERE updated_at < now() - $1::bigint * interval '1 microsecond' AND kind <> ALL ($3::text[])
     ORDER BY updated_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM job_history_days_default WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id
), ` + goneRows + `
SELECT count(*) FROM gone`
