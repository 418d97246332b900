ALTER TABLE upload_store DROP COLUMN IF EXISTS gc_partials_after;
ALTER TABLE upload_store DROP COLUMN IF EXISTS gc_blobs_after;
