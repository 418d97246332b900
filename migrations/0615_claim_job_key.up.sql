-- Claim engine: the business keys move to a table of their own (#38).
--
-- (kind, business_key) names one job, live or finished, until claim.purge
-- deletes that job's history. Until now the key was a unique constraint
-- on job, plus a look-up in job_history and a constraint trigger for the
-- history's side. A claim is never a HOT update (it changes state, which
-- the partial indexes name), so every claim wrote a new entry into that
-- text index, and every completion a second one into job_history_key:
-- two of the eight index insertions a job cost, and the two dearest
-- (text comparisons all the way down the tree). Measured on the drain of
-- 150,000 no-op jobs, the two cost about 15 % of the throughput and 260
-- of the 1,655 WAL bytes per job.
--
-- job_key is written once, by the enqueue that creates the job, and
-- deleted with the job's history: a claim, a completion, a retry or a
-- heartbeat never touches it. Its primary key is the uniqueness itself,
-- across live and finished jobs, with no window: an enqueue of a key
-- whose job is finishing no longer waits on, or races with, the job's
-- row (the trigger of 0614 existed for that window; it goes).
CREATE TABLE job_key (
    kind         text   NOT NULL,
    business_key text   NOT NULL,
    job_id       bigint NOT NULL,
    PRIMARY KEY (kind, business_key)
);
-- Retention deletes a day's keys by its jobs' ids, a probe each (= ANY of
-- an array, as for job_event): the cost of the day, never of the keys
-- beside it. Joined on (kind, business_key) instead, the planner hashed
-- the whole key table for a day of 3,000 jobs.
CREATE INDEX job_key_job ON job_key (job_id);

INSERT INTO job_key (kind, business_key, job_id)
SELECT kind, business_key, id FROM job
UNION ALL
SELECT kind, business_key, id FROM job_history;

DROP TRIGGER job_key_unique_across_history ON job;
DROP FUNCTION job_key_unique_across_history();
ALTER TABLE job DROP CONSTRAINT job_kind_business_key_key;
DROP INDEX job_history_key;
