package idem

import "github.com/fencelab/fencelab/core/pg"

// All of core/idem's SQL. Every statement that changes a record is
// conditional on what the caller believes the record to be (state, fence),
// so a request that lost its claim changes nothing.

// sqlBegin records a first request as in flight, or takes over an in-flight
// record whose lock has expired or whose owner's session is gone (same
// fingerprint only: the key stays bound to the payload it was first used
// with). Either way the record gets a fresh fence from the sequence, which
// fences out the previous holder: its finish is conditional on the old
// fence (IDEM-I1). The record names this process's presence session as its
// owner ($6, $7; NULL while the process has none).
//
// The CASE orders the tests: pg_stat_activity is read only for an in-flight
// record whose lock still holds, never on a replay.
//
// No row back means the key is taken: the caller reads the record and
// answers replay, 409 in flight or 422 reused.
const sqlBegin = `
INSERT INTO idem_request AS r (scope, subject, key, fingerprint, state, locked_until, owner_pid, owner_started)
VALUES ($1, $2, $3, $4, 'in_flight', now() + $5 * interval '1 millisecond', $6, $7)
ON CONFLICT (scope, subject, key) DO UPDATE
   SET fence         = nextval('idem_fence'),
       takeovers     = r.takeovers + 1,
       locked_until  = EXCLUDED.locked_until,
       owner_pid     = EXCLUDED.owner_pid,
       owner_started = EXCLUDED.owner_started
 WHERE CASE WHEN r.state <> 'in_flight' OR r.fingerprint <> EXCLUDED.fingerprint THEN false
            WHEN r.locked_until <= now() THEN true
            ELSE ` + sqlOwnerGone + ` END
RETURNING r.fence, r.takeovers`

// sqlOwnerGone is true when in-flight record r names an owner session that
// no longer exists: no backend with its pid, or one with another start time
// (the pid was reused). A backend whose start time the caller may not see
// (another role's session, without pg_read_all_stats) counts as alive, so
// the doubt falls on the side of waiting for the lock.
const sqlOwnerGone = `(r.owner_pid IS NOT NULL AND NOT EXISTS (
              SELECT 1 FROM pg_stat_get_activity(r.owner_pid) a
               WHERE a.backend_start = r.owner_started OR a.backend_start IS NULL))`

// sqlPresence names the presence connection's own session.
const sqlPresence = `SELECT pid, backend_start FROM pg_stat_get_activity(pg_backend_pid())`

// sqlLookup reads a record that sqlBegin could not claim. A record whose
// owner is gone reads as unlocked, so the caller claims again.
const sqlLookup = `
SELECT fingerprint, state,
       CASE WHEN state = 'in_flight' AND ` + sqlOwnerGone + ` THEN 0
            ELSE COALESCE(ceil(GREATEST(EXTRACT(EPOCH FROM locked_until - now()) * 1000, 0)), 0)::bigint END,
       status, content_type, body
  FROM idem_request r
 WHERE scope = $1 AND subject = $2 AND key = $3`

// sqlFinish stores the final response, in the effect's transaction, if and
// only if this request still holds the record's fence. A request that was
// taken over after its lock expired matches nothing here, and its whole
// transaction — effect included — rolls back (IDEM-I1).
//
// It travels in one round trip with the COMMIT behind it (pg.PipeTx), so
// matching nothing must be an error, not a count to check afterwards: by
// then the COMMIT would have run. The CASE refuses with a cast that fails
// (pg.Refused with fenceLostMarker); the failed statement aborts the
// transaction and the server skips the pipelined COMMIT.
const sqlFinish = `
WITH finished AS (
    UPDATE idem_request
       SET state = 'done', status = @status, content_type = @content_type, body = @body,
           locked_until = NULL, finished_at = now(), owner_pid = NULL, owner_started = NULL
     WHERE scope = @scope AND subject = @subject AND key = @key
       AND fence = @fence AND state = 'in_flight'
 RETURNING 1
)
SELECT CASE n WHEN 1 THEN n ELSE ('idem: fence lost, records finished: ' || n)::int END
  FROM (SELECT count(*)::int AS n FROM finished) f`

// finishStmt is sqlFinish rewritten to $n once (it runs on every request).
var finishStmt = pg.MustNamed(sqlFinish)

// fenceLostMarker starts the text sqlFinish fails to cast.
const fenceLostMarker = "idem: fence lost"

// sqlRelease forgets an in-flight record after an unexpected error, so the
// client may retry at once. Deleting is safe because fences come from a
// sequence: a new record for the same key gets a fence nobody held before.
const sqlRelease = `
DELETE FROM idem_request
 WHERE scope = $1 AND subject = $2 AND key = $3
   AND fence = $4 AND state = 'in_flight'`

// sqlPurge deletes up to $2 records created more than $1 microseconds ago
// by the database clock: finished ones, and in-flight ones whose lock has
// expired (their request is long dead).
const sqlPurge = `
DELETE FROM idem_request
 WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM idem_request
         WHERE created_at < now() - $1::bigint * interval '1 microsecond'
           AND (state = 'done' OR locked_until < now())
         ORDER BY created_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED))`

// sqlAsyncCommit makes the claim transaction commit without waiting for
// its WAL flush. Losing that commit in a crash is harmless: the effect
// transaction that depends on the record commits synchronously later, and
// its flush carries every earlier WAL record with it; without such a commit
// there is no effect to protect.
const sqlAsyncCommit = `SET LOCAL synchronous_commit = off`
