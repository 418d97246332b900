-- Upload, bounded growth (docs/DATA.md): sessions that ended without a
-- file (failed, aborted, expired) are deleted with their chunk and hash
-- rows once FENCELAB_UPLOAD_SESSION_RETENTION has passed, by the GC job,
-- oldest first from this index.
CREATE INDEX IF NOT EXISTS upload_session_ended ON upload_session (ended_at) WHERE state IN ('failed', 'aborted', 'expired');
