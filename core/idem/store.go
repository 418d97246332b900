package idem

import "github.com/fencelab/fencelab/core/pg"

// All of core/idem's SQL. Every statement that changes a record is
// conditional on what the caller believes the record to be (state, fence),
// so a request that lost its claim changes nothing.

// sqlBegin records a first request as in flight, or takes over an in-flight
// record whose lock has expired (same fingerprint only: the key stays bound
// to the payload it was first used with). Either way the record gets a fresh
// fence from the sequence, which fences out the previous holder: its finish
// is conditional on the old fence (IDEM-I1).
//
// No row back means the key is taken: the caller reads the record and
// answers replay, 409 in flight or 422 reused.
const sqlBegin = `
INSERT INTO idem_request AS r (scope, subject, key, fingerprint, state, locked_until)
VALUES ($1, $2, $3, $4, 'in_flight', now() + $5 * interval '1 millisecond')
ON CONFLICT (scope, subject, key) DO UPDATE
   SET fence        = nextval('idem_fence'),
       takeovers    = r.takeovers + 1,
       locked_until = EXCLUDED.locked_until
 WHERE r.state = 'in_flight'
   AND r.locked_until <= now()
   AND r.fingerprint = EXCLUDED.fingerprint
RETURNING r.fence, r.takeovers`

// sqlLookup reads a record that sqlBegin could not claim.
const sqlLookup = `
SELECT fingerprint, state,
       COALESCE(ceil(GREATEST(EXTRACT(EPOCH FROM locked_until - now()) * 1000, 0)), 0)::bigint,
       status, content_type, body
  FROM idem_request
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
           locked_until = NULL, finished_at = now()
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
