-- Chunked upload (spec 50, "Chunked upload"; the book's upload chapter).
-- Bytes live in a blob store (a local directory), metadata here; no commit
-- covers both. These tables are the database's half of the agreement:
-- which blobs exist or may exist (upload_blob), who references them
-- (file_object), and the sessions that produce them.

-- Where this database's blobs live, so `fencelab check` (UP-F1) can look at
-- the files. Written by the service before it writes or sweeps a blob. The
-- store directory holds a marker with store_id: a directory is bound to one
-- database, whose GC alone may sweep it.
CREATE TABLE upload_store (
    name       text        PRIMARY KEY CHECK (name = 'local'),
    store_id   uuid        NOT NULL DEFAULT gen_random_uuid(),
    location   text        NOT NULL CHECK (location LIKE '/%'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per blob that exists or may exist at blobs/sha256/<sha256>.
-- The row is inserted (or touched) before the file is renamed into place,
-- so a file without a row is stray and a row without a file is either in
-- flight or being deleted. Commit and GC serialise on this row (UP-F2):
-- commit raises refs only while the row is 'present', GC marks it
-- 'deleting' only while refs = 0 and the grace period has passed, and the
-- file is unlinked only under the row's lock while it is still 'deleting'.
CREATE TABLE upload_blob (
    sha256     text        PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint      NOT NULL CHECK (size >= 0),
    state      text        NOT NULL DEFAULT 'present' CHECK (state IN ('present', 'deleting')),
    -- Number of file_object rows naming this blob (UP-F2 checks the count).
    refs       integer     NOT NULL DEFAULT 0 CHECK (refs >= 0),
    -- Last time a completion wrote (or re-wrote) these bytes, or a commit
    -- referenced them; the grace period runs from here.
    touched_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- UP-F2, first line: a referenced blob is never being deleted.
    CONSTRAINT upload_blob_referenced_is_present CHECK (state = 'present' OR refs = 0)
);
CREATE INDEX upload_blob_unreferenced ON upload_blob (touched_at) WHERE refs = 0;

CREATE TABLE upload_session (
    id           uuid        PRIMARY KEY,
    owner        text        NOT NULL,
    total_size   bigint      NOT NULL CHECK (total_size >= 0),
    chunk_count  integer     NOT NULL CHECK (chunk_count >= 1),
    -- Every chunk but the last is exactly chunk_size bytes; the last holds
    -- the rest. Chunk n lives at offset n * chunk_size of the partial file.
    chunk_size   bigint      NOT NULL CHECK (chunk_size >= 0),
    sha256       text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    state        text        NOT NULL DEFAULT 'open'
                 CHECK (state IN ('open', 'completed', 'committed', 'failed', 'aborted', 'expired')),
    blob_sha256  text,
    file_id      uuid,
    failure      text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Last activity (creation, a stored chunk, completion): abandoned
    -- sessions are expired a grace period after it.
    touched_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    ended_at     timestamptz,
    CONSTRAINT upload_session_layout CHECK (
        (total_size = 0 AND chunk_count = 1 AND chunk_size = 0)
        OR (chunk_size > 0 AND chunk_count = (total_size + chunk_size - 1) / chunk_size)),
    -- UP-F5, first line: only a verified completion names a blob, and it is
    -- the declared one.
    CONSTRAINT upload_session_blob_is_declared CHECK (blob_sha256 IS NULL OR blob_sha256 = sha256),
    CONSTRAINT upload_session_completed_has_blob CHECK (
        state NOT IN ('completed', 'committed') OR (blob_sha256 IS NOT NULL AND completed_at IS NOT NULL)),
    CONSTRAINT upload_session_committed_has_file CHECK (state <> 'committed' OR file_id IS NOT NULL)
);
CREATE INDEX upload_session_live ON upload_session (touched_at) WHERE state IN ('open', 'completed');
CREATE INDEX upload_session_owner ON upload_session (owner, created_at);

-- One row per stored chunk, inserted after its bytes are durable in the
-- partial file. Never updated: a chunk's bytes are fixed once stored.
CREATE TABLE upload_chunk (
    session_id uuid        NOT NULL REFERENCES upload_session (id),
    n          integer     NOT NULL CHECK (n >= 0),
    size       bigint      NOT NULL CHECK (size >= 0),
    -- The checksum the client sent with the chunk, verified; NULL if none.
    sha256     text        CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    stored_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, n)
);

-- The running SHA-256 of a session's leading chunks: chunks 0 ..
-- hashed_chunks-1 have been fed, in order, to the hash whose state this is.
-- Chunk PUTs advance it as the chunks arrive, so complete hashes only what
-- is left before it checks the digest against the declaration (UP-F5). A
-- row of its own, so hashing never holds the session's row.
CREATE TABLE upload_hash (
    session_id    uuid    PRIMARY KEY REFERENCES upload_session (id),
    hashed_chunks integer NOT NULL CHECK (hashed_chunks >= 0),
    state         bytea   NOT NULL
);

-- Committed metadata: a named file of one owner, referencing a blob.
CREATE TABLE file_object (
    id              uuid        PRIMARY KEY,
    owner           text        NOT NULL,
    name            text        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 255),
    metadata        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    -- UP-F2, first line: a referenced blob row cannot be deleted.
    blob_sha256     text        NOT NULL REFERENCES upload_blob (sha256) ON DELETE RESTRICT,
    size            bigint      NOT NULL CHECK (size >= 0),
    session_id      uuid        NOT NULL UNIQUE REFERENCES upload_session (id),
    -- The processing job (claim engine) that publishes the file.
    job_id          bigint      NOT NULL UNIQUE,
    state           text        NOT NULL DEFAULT 'processing' CHECK (state IN ('processing', 'published')),
    content_type    text,
    summary         jsonb,
    -- Which run published it: the job's fence and owner at that moment (UP-F3).
    published_fence bigint,
    published_by    text,
    published_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT file_object_published_is_complete CHECK (
        (state = 'published') = (published_at IS NOT NULL AND published_fence IS NOT NULL
                                 AND published_by IS NOT NULL AND content_type IS NOT NULL AND summary IS NOT NULL))
);
CREATE INDEX file_object_owner ON file_object (owner, created_at);
CREATE INDEX file_object_blob ON file_object (blob_sha256);

-- UP-F3, first line: publication happens once and is final; what was
-- committed about a file never changes.
CREATE FUNCTION file_object_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'upload: file % cannot be deleted while its blob accounting depends on it', OLD.id;
    END IF;
    IF (NEW.id, NEW.owner, NEW.name, NEW.metadata, NEW.blob_sha256, NEW.size, NEW.session_id, NEW.job_id)
       IS DISTINCT FROM (OLD.id, OLD.owner, OLD.name, OLD.metadata, OLD.blob_sha256, OLD.size, OLD.session_id, OLD.job_id) THEN
        RAISE EXCEPTION 'upload: file % is immutable apart from its publication', OLD.id;
    END IF;
    IF OLD.state = 'published' THEN
        RAISE EXCEPTION 'upload: file % is published; publication is final (UP-F3)', OLD.id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER file_object_guard BEFORE UPDATE OR DELETE ON file_object
    FOR EACH ROW EXECUTE FUNCTION file_object_guard();
