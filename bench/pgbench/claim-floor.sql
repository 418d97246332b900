-- The claim floor: pgbench -D batch=B -f bench/pgbench/claim-floor.sql, on
-- the tables of claim-floor-setup.sql. Each transaction of the script is
-- one claim of up to B ready jobs (SKIP LOCKED, the fence raised, a lease,
-- a claimed event a job) and then the completion of what this client holds
-- (the fenced delete, the history row, a succeeded event a job): the
-- writes a drain of fenced jobs cannot do without, in two statements and
-- two commits, with no handler, no pool and no client-side work at all.
WITH claimed AS (
    UPDATE claim_floor_job
       SET state = 'running', owner = :client_id, fence = fence + 1,
           lease_until = now() + interval '30 seconds'
     WHERE id IN (SELECT id FROM claim_floor_job WHERE state = 'ready'
                   ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
 RETURNING id, fence
)
INSERT INTO claim_floor_event (job_id, event, fence, owner)
SELECT id, 'claimed', fence, :client_id FROM claimed;
WITH done AS (
    DELETE FROM claim_floor_job
     WHERE owner = :client_id AND state = 'running' AND lease_until > now()
 RETURNING *
), moved AS (
    INSERT INTO claim_floor_history (id, kind, state, owner, fence, args, created_at)
    SELECT id, kind, 'succeeded', owner, fence, args, created_at FROM done
)
INSERT INTO claim_floor_event (job_id, event, fence, owner)
SELECT id, 'succeeded', fence, owner FROM done;
