DROP INDEX IF EXISTS job_live_idx; DROP INDEX IF EXISTS job_finished_idx;
