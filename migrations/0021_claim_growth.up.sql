-- Claim engine, bounded growth (docs/DATA.md): finished jobs are purged
-- after FENCELAB_CLAIM_RETENTION by the claim.purge kind, and the
-- queue-depth gauge reads only live jobs.

-- The retention purge's scan: per kind, the oldest finished jobs first.
-- One index range per kind (kinds whose rows a module points at are
-- skipped before their range is touched), so a batch examines what it
-- deletes, however much history the other kinds keep.
CREATE INDEX IF NOT EXISTS job_finished_idx ON job (kind, updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled');

-- The queue-depth gauge (every /metrics scrape): live jobs only. Finished
-- jobs never enter it, so its size is the queue's, not the history's.
CREATE INDEX IF NOT EXISTS job_live_idx ON job (kind, state) WHERE state IN ('ready', 'running', 'unknown', 'needs_review');
