-- Claim engine: one index write fewer per enqueue and per claim (#25).
-- A state change can never be a HOT update (state sits in the partial
-- indexes' predicates), so each transition inserts an entry into every
-- index whose predicate the new row version satisfies. job_live_idx held
-- every ready and running job only to let the queue-depth gauge count
-- them in one range; the gauge now counts each live state through that
-- state's own partial index (job_ready_idx, job_running_lease_idx,
-- job_attention_idx), still in proportion to the live queue, never to
-- the history (docs/DATA.md).
DROP INDEX IF EXISTS job_live_idx;
