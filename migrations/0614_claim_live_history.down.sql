DROP TRIGGER IF EXISTS job_key_unique_across_history ON job;
DROP FUNCTION IF EXISTS job_key_unique_across_history();
DROP VIEW IF EXISTS job_all;
INSERT INTO job (id, kind, business_key, state, payload, due_at, created_at, updated_at,
                 attempts, max_attempts, owner, fence, lease_until, last_error, result)
SELECT id, kind, business_key, state, payload, due_at, created_at, updated_at,
       attempts, max_attempts, owner, fence, lease_until, last_error, result
  FROM job_history;
DROP TABLE IF EXISTS job_history;
