package lease

// All of the package's SQL. The statements read like River's leader
// election (river_leader.sql): one INSERT … ON CONFLICT DO UPDATE … WHERE to
// take a lease, one conditional UPDATE to renew it, each re-checking holder
// and expiry against the database clock. Two differences matter here: the
// row is never deleted by this package, because it carries the fence (the
// report's retention deletes a whole report day, lease included, long after
// its expiry: docs/DATA.md), and every grant also issues a fence and records
// it in lease_grant in the same statement.

// sqlAcquire takes the lease when it is new, expired or released, or when
// the caller already holds it, and issues fence+1 either way (LOCK-I1: a
// re-take by the same holder still invalidates its older token). When
// another holder's lease is live, the WHERE is false, nothing is written and
// no row comes back: ErrHeld.
//
// Concurrent acquirers serialise on the row lock ON CONFLICT takes; the
// loser re-evaluates the WHERE against the winner's committed row and sees
// a live lease. The grant row is written by the same statement (a
// data-modifying CTE), so a grant without its history, or history without
// its grant, cannot exist.
const sqlAcquire = `
WITH granted AS (
    INSERT INTO lease AS l (name, holder, fence, granted_at, expires_at)
    VALUES ($1, $2, 1, now(), now() + $3 * interval '1 microsecond')
    ON CONFLICT (name) DO UPDATE SET
        holder     = excluded.holder,
        fence      = l.fence + 1,
        granted_at = excluded.granted_at,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= now()
       OR l.holder = excluded.holder
    RETURNING name, holder, fence, granted_at, expires_at
), history AS (
    INSERT INTO lease_grant (name, holder, fence, granted_at, expires_at)
    SELECT name, holder, fence, granted_at, expires_at FROM granted
)
SELECT fence, granted_at, expires_at FROM granted`

// sqlRenew extends a lease only while it is still the caller's: same holder,
// same fence (no re-take since) and not yet expired by the database clock.
// An expired lease is not revived even if nobody took it: the holder may
// already have been told it lost it.
const sqlRenew = `
UPDATE lease
   SET expires_at = now() + $4 * interval '1 microsecond'
 WHERE name = $1
   AND holder = $2
   AND fence = $3
   AND expires_at > now()
RETURNING expires_at`

// sqlRelease ends the caller's grant now, keeping the row and its fence.
// It matches an expired grant that nobody has taken since (a no-op in
// effect), but never a newer holder's.
const sqlRelease = `
UPDATE lease
   SET expires_at = least(expires_at, now())
 WHERE name = $1
   AND holder = $2
   AND fence = $3`

// sqlGet reads a lease and whether it is live by the database clock.
const sqlGet = `
SELECT holder, fence, granted_at, expires_at, expires_at > now()
  FROM lease
 WHERE name = $1`

// sqlGuard admits a write to resource carrying (lease_name, fence) when no
// write has carried a higher fence of that lease, and records the fence as
// the highest seen. It runs inside the writer's transaction: the row lock
// it takes orders concurrent writers of one resource, and a rollback of the
// write rolls the fence back with it. Equal fences are admitted, so a
// holder may write twice (a retry) under one grant.
const sqlGuard = `
INSERT INTO fence_guard AS g (resource, lease_name, max_fence, holder, updated_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (resource) DO UPDATE SET
    max_fence  = excluded.max_fence,
    holder     = excluded.holder,
    updated_at = excluded.updated_at
WHERE g.max_fence <= excluded.max_fence
  AND g.lease_name = excluded.lease_name
RETURNING max_fence`

// sqlGuardState explains a refusal. ON CONFLICT locked the row even though
// it did not update it, so this reads the state that refused the write.
const sqlGuardState = `
SELECT lease_name, max_fence, holder FROM fence_guard WHERE resource = $1`

// sqlPurge is the retention of a user's leases (PurgeTx; services/report
// calls it for report.purge): up to $3 leases whose name starts with $1
// and whose latest grant and expiry are both more than $2 µs old by the
// database clock are deleted with every lease_grant row of their names
// and the fence_guard rows bound to them, in one statement. All of a
// name's grants go at once, so LOCK-I1's per-name order has no gap.
//
// Why deleting a lease row is safe here, when migrations/0010 keeps it
// because it carries the fence: once the row is gone, the next Acquire
// of that name starts the fence again at 1, and the name's guards, gone
// too, no longer remember the highest fence that wrote. A holder still
// carrying an old fence of that name could then write again. Only leases
// that expired more than the retention ago are taken, so the one
// assumption is that no holder stays paused, between its checks and its
// write, for longer than the retention; every other holder has long been
// refused or gone. Live leases are never touched (expires_at is in the
// past), and a name re-taken since is kept (granted_at is recent).
//
// Oldest grant first along lease_granted, FOR UPDATE SKIP LOCKED on the
// lease rows, so an Acquire of the same name waits for the purge and
// then inserts a fresh row, and two runs split the work; grants and
// guards are reached by key (lease_grant_fence_once, fence_guard_lease),
// so a batch examines what it deletes and the older leases of other
// names, never the history inside the window. gate says, for this
// transaction only, that lease_grant's append-only trigger may let these
// deletes through (migrations/0607); every delete reads doomed, which
// reads gate first.
const sqlPurge = `
WITH gate AS MATERIALIZED (
    SELECT set_config('fencelab.lease_purge', 'on', true) AS purge
), doomed AS MATERIALIZED (
    SELECT l.name
      FROM lease l, gate
     WHERE gate.purge = 'on' AND starts_with(l.name, $1)
       AND l.granted_at < now() - $2::bigint * interval '1 microsecond'
       AND l.expires_at < now() - $2::bigint * interval '1 microsecond'
     ORDER BY l.granted_at
     LIMIT $3
       FOR UPDATE OF l SKIP LOCKED
), guards AS (
    DELETE FROM fence_guard WHERE lease_name = ANY (ARRAY(SELECT name FROM doomed))
), grants AS (
    DELETE FROM lease_grant WHERE name = ANY (ARRAY(SELECT name FROM doomed))
    RETURNING 1
), gone AS (
    DELETE FROM lease WHERE name = ANY (ARRAY(SELECT name FROM doomed))
    RETURNING name
)
SELECT ARRAY(SELECT name FROM gone), (SELECT count(*) FROM grants)`
