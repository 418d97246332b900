-- Upload GC scans incrementally (docs/DATA.md): each run examines at most
-- FENCELAB_UPLOAD_GC_SCAN entries of the blob and the partial directory,
-- the next ones in name order after these cursors, and wraps to '' once a
-- directory is exhausted.
ALTER TABLE upload_store ADD COLUMN IF NOT EXISTS gc_blobs_after text NOT NULL DEFAULT '';
ALTER TABLE upload_store ADD COLUMN IF NOT EXISTS gc_partials_after text NOT NULL DEFAULT '';
