CREATE INDEX IF NOT EXISTS job_live_idx ON job (kind, state) WHERE state IN ('ready', 'running', 'unknown', 'needs_review');
