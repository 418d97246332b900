package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// All of the module's SQL (invariants.go holds the invariant checks).
// Durations travel as bigint microseconds.

const sessionColumns = `id::text, owner, total_size, chunk_count, chunk_size, sha256, state,
	coalesce(blob_sha256, ''), coalesce(file_id::text, ''), coalesce(failure, ''), created_at, touched_at, completed_at`

const fileColumns = `id::text, owner, name, metadata, blob_sha256, size, state, coalesce(content_type, ''), summary,
	session_id::text, job_id, created_at, published_at`

const (
	sqlInsertSession = `
WITH s AS (
    INSERT INTO upload_session (id, owner, total_size, chunk_count, chunk_size, sha256)
    VALUES (@id, @owner, @total_size, @chunk_count, @chunk_size, @sha256)
    RETURNING *
), h AS (
    INSERT INTO upload_hash (session_id, hashed_chunks, state) SELECT id, 0, @hash_state FROM s
)
SELECT ` + sessionColumns + `, 0 FROM s`

	sqlGetSession = `
SELECT ` + sessionColumns + `, (SELECT count(*) FROM upload_chunk c WHERE c.session_id = s.id)
FROM upload_session s WHERE id = $1`

	sqlMissingChunks = `
SELECT g.n FROM generate_series(0, $2::int - 1) AS g(n)
WHERE NOT EXISTS (SELECT 1 FROM upload_chunk c WHERE c.session_id = $1 AND c.n = g.n)
ORDER BY g.n LIMIT $3`

	sqlChunkStored = `SELECT EXISTS (SELECT 1 FROM upload_chunk WHERE session_id = $1 AND n = $2)`

	// sqlChunkStoredAndHash is a chunk writer's look under its range lock:
	// is the chunk recorded, and where does the running hash stand (read
	// without a lock: a hint whether the chunk arrives in order and can be
	// hashed as it is written; foldChunks re-checks under the row lock).
	sqlChunkStoredAndHash = `
SELECT EXISTS (SELECT 1 FROM upload_chunk c WHERE c.session_id = $1 AND c.n = $2),
       coalesce(h.hashed_chunks, -1), h.state
FROM (SELECT 1) one LEFT JOIN upload_hash h ON h.session_id = $1`

	// sqlStoreChunk records a chunk whose bytes are durable, only while the
	// session is open. Touching the session takes its row lock, so the
	// insert is ordered against complete, abort and GC's expiry, which all
	// change the state with a conditional UPDATE of the same row.
	sqlStoreChunk = `
WITH s AS (
    UPDATE upload_session SET touched_at = now()
    WHERE id = $1 AND state = 'open'
    RETURNING id
)
INSERT INTO upload_chunk (session_id, n, size, sha256)
SELECT id, $2, $3, $4 FROM s
ON CONFLICT (session_id, n) DO NOTHING
RETURNING n`

	// sqlRecordStore records the store's location and returns the
	// database's store id and the location recorded before.
	// sqlLockHash takes a session's running hash; with SKIP LOCKED a chunk
	// PUT leaves it to whoever is advancing it already.
	sqlLockHash    = `SELECT hashed_chunks, state FROM upload_hash WHERE session_id = $1 FOR UPDATE`
	sqlTryLockHash = sqlLockHash + ` SKIP LOCKED`
	// sqlSaveHash moves the running hash forward from the prefix it was
	// taken at (UP-F5: the state always covers exactly hashed_chunks chunks;
	// the row lock already orders savers, the condition says so in SQL).
	sqlSaveHash     = `UPDATE upload_hash SET hashed_chunks = $3, state = $4 WHERE session_id = $1 AND hashed_chunks = $2 AND $3 > $2`
	sqlStoredChunks = `SELECT n FROM upload_chunk WHERE session_id = $1 AND n >= $2 ORDER BY n`

	sqlRecordStore = `
WITH before AS (SELECT location FROM upload_store WHERE name = 'local')
INSERT INTO upload_store (name, location) VALUES ('local', $1)
ON CONFLICT (name) DO UPDATE SET location = EXCLUDED.location, updated_at = now()
RETURNING store_id::text, coalesce((SELECT location FROM before), '')`

	// sqlUpsertBlob announces bytes about to be renamed into
	// blobs/sha256/<hex>, before the rename (UP-F2). A row GC has marked
	// 'deleting' is revived: GC unlinks only under the row's lock and only
	// while the row still says 'deleting', so either this statement waits
	// for the unlink and the delete (and inserts a fresh row) or the unlink
	// never happens.
	sqlUpsertBlob = `
INSERT INTO upload_blob (sha256, size) VALUES ($1, $2)
ON CONFLICT (sha256) DO UPDATE SET state = 'present', touched_at = now()
RETURNING size`

	sqlMarkCompleted = `
UPDATE upload_session SET state = 'completed', blob_sha256 = sha256, completed_at = now(), touched_at = now()
WHERE id = $1 AND state = 'open'
RETURNING ` + sessionColumns + `, chunk_count`

	sqlMarkFailed = `
UPDATE upload_session SET state = 'failed', failure = $2, ended_at = now()
WHERE id = $1 AND state = 'open'`

	sqlAbort = `
UPDATE upload_session SET state = 'aborted', ended_at = now()
WHERE id = $1 AND state IN ('open', 'completed')
RETURNING ` + sessionColumns + `, 0`

	// sqlReferenceBlob is commit's first statement (UP-F2): raising refs is
	// a write on the very row GC marks 'deleting', so the two serialise on
	// its lock and each re-checks the other's condition on the newest
	// version. A row that is 'deleting' (or gone) cannot be referenced.
	sqlReferenceBlob = `
UPDATE upload_blob SET refs = refs + 1, touched_at = now()
WHERE sha256 = $1 AND state = 'present'
RETURNING size`

	sqlMarkCommitted = `
UPDATE upload_session SET state = 'committed', file_id = $2, ended_at = now()
WHERE id = $1 AND state = 'completed'`

	sqlInsertFile = `
INSERT INTO file_object (id, owner, name, metadata, blob_sha256, size, session_id, job_id)
VALUES (@id, @owner, @name, @metadata, @blob_sha256, @size, @session_id, @job_id)
RETURNING ` + fileColumns

	sqlGetFile = `SELECT ` + fileColumns + ` FROM file_object WHERE id = $1`

	// sqlPublish is UP-F3's second line: publication happens once, from
	// 'processing'. The first is the fenced completion in the same
	// transaction (and the trigger that makes publication final).
	sqlPublish = `
UPDATE file_object
SET state = 'published', content_type = $2, summary = $3, published_fence = $4, published_by = $5, published_at = now()
WHERE id = $1 AND state = 'processing'
RETURNING ` + fileColumns

	// GC. Each marking statement picks rows with SKIP LOCKED (a commit in
	// flight holds its blob row: skipped, looked at next run) and re-checks
	// its condition in the outer WHERE, which READ COMMITTED evaluates on
	// the newest version of a row that changed after the statement began.

	sqlExpireSessions = `
UPDATE upload_session s SET state = 'expired', ended_at = now()
FROM (SELECT id FROM upload_session
      WHERE state IN ('open', 'completed') AND touched_at < now() - $1::bigint * interval '1 microsecond'
      ORDER BY touched_at LIMIT $2
      FOR UPDATE SKIP LOCKED) d
WHERE s.id = d.id AND s.state IN ('open', 'completed')
  AND s.touched_at < now() - $1::bigint * interval '1 microsecond'
RETURNING s.id::text`

	// sqlPurgeSessions deletes up to $2 sessions that ended without a file
	// (failed, aborted, expired) more than $1 microseconds ago by the
	// database clock, with their chunk and hash rows, oldest first from
	// upload_session_ended. No file_object points at such a session.
	sqlPurgeSessions = `
WITH doomed AS (
    SELECT id FROM upload_session
     WHERE state IN ('failed', 'aborted', 'expired')
       AND ended_at < now() - $1::bigint * interval '1 microsecond'
     ORDER BY ended_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), chunks AS (
    DELETE FROM upload_chunk WHERE session_id = ANY (ARRAY(SELECT id FROM doomed))
), hashes AS (
    DELETE FROM upload_hash WHERE session_id = ANY (ARRAY(SELECT id FROM doomed))
)
DELETE FROM upload_session WHERE id = ANY (ARRAY(SELECT id FROM doomed))`

	sqlMarkBlobsDeleting = `
UPDATE upload_blob b SET state = 'deleting'
FROM (SELECT sha256 FROM upload_blob
      WHERE state = 'present' AND refs = 0 AND touched_at < now() - $1::bigint * interval '1 microsecond'
      ORDER BY touched_at LIMIT $2
      FOR UPDATE SKIP LOCKED) d
WHERE b.sha256 = d.sha256 AND b.state = 'present' AND b.refs = 0
  AND b.touched_at < now() - $1::bigint * interval '1 microsecond'
RETURNING b.sha256`

	sqlDeletingBlobs = `SELECT sha256 FROM upload_blob WHERE state = 'deleting' ORDER BY sha256 LIMIT $1`

	// sqlLockDeleting holds a 'deleting' row while its file is unlinked, so
	// a completion re-announcing the same bytes waits (UP-F2).
	sqlLockDeleting = `SELECT sha256 FROM upload_blob WHERE sha256 = $1 AND state = 'deleting' FOR UPDATE SKIP LOCKED`

	sqlDeleteBlob = `DELETE FROM upload_blob WHERE sha256 = $1 AND state = 'deleting'`

	sqlUnknownBlobs = `
SELECT n FROM unnest($1::text[]) AS n
WHERE NOT EXISTS (SELECT 1 FROM upload_blob b WHERE b.sha256 = n)`

	// sqlTombstone claims a stray file (no row) for deletion; a completion
	// announcing the same bytes first wins (conflict: nothing happens).
	sqlTombstone = `
INSERT INTO upload_blob (sha256, size, state, touched_at) VALUES ($1, $2, 'deleting', $3)
ON CONFLICT (sha256) DO NOTHING`

	sqlClosedPartials = `
SELECT p::text FROM unnest($1::uuid[]) AS p
WHERE NOT EXISTS (SELECT 1 FROM upload_session s WHERE s.id = p AND s.state = 'open')`
)

func scanSession(row pgx.Row) (Session, error) {
	var s Session
	var completed *time.Time
	err := row.Scan(&s.ID, &s.Owner, &s.TotalSize, &s.ChunkCount, &s.ChunkSize, &s.SHA256, &s.State,
		&s.blobSHA256, &s.FileID, &s.Failure, &s.CreatedAt, &s.touchedAt, &completed, &s.Received)
	s.CompletedAt = completed
	return s, pg.MapError(err)
}

func scanFile(row pgx.Row) (File, error) {
	var f File
	var summary []byte
	err := row.Scan(&f.ID, &f.Owner, &f.Name, &f.Metadata, &f.SHA256, &f.Size, &f.State, &f.ContentType, &summary,
		&f.SessionID, &f.JobID, &f.CreatedAt, &f.PublishedAt)
	if err == nil && summary != nil {
		f.Summary = new(Summary)
		err = json.Unmarshal(summary, f.Summary)
	}
	return f, pg.MapError(err)
}

// insertSessionStmt is sqlInsertSession rewritten to $n once (pg.MustNamed).
var insertSessionStmt = pg.MustNamed(sqlInsertSession)

func insertSession(ctx context.Context, db pg.Querier, id, owner string, total int64, count int, chunkSize int64, sha string, hashState []byte) (Session, error) {
	return scanSession(db.QueryRow(ctx, insertSessionStmt.SQL, insertSessionStmt.Args(pgx.NamedArgs{
		"id":          id,
		"owner":       owner,
		"total_size":  total,
		"chunk_count": count,
		"chunk_size":  chunkSize,
		"sha256":      sha,
		"hash_state":  hashState,
	})...))
}

// lockHash takes a session's running hash for the transaction; with try,
// ok is false when another transaction holds it.
func lockHash(ctx context.Context, tx pgx.Tx, id string, try bool) (hashed int, state []byte, ok bool, err error) {
	q := sqlLockHash
	if try {
		q = sqlTryLockHash
	}
	err = pg.MapError(tx.QueryRow(ctx, q, id).Scan(&hashed, &state))
	if try && errors.Is(err, pg.ErrNotFound) {
		return 0, nil, false, nil
	}
	return hashed, state, err == nil, err
}

func saveHash(ctx context.Context, tx pgx.Tx, id string, from, hashed int, state []byte) error {
	tag, err := tx.Exec(ctx, sqlSaveHash, id, from, hashed, state)
	if err == nil && tag.RowsAffected() != 1 {
		return fmt.Errorf("upload: session %s: running hash moved from chunk %d while held", id, from)
	}
	return pg.MapError(err)
}

// storedFrom lists the stored chunk indexes from n on, in order.
func storedFrom(ctx context.Context, db pg.Querier, id string, n int) ([]int, error) {
	rows, err := db.Query(ctx, sqlStoredChunks, id, n)
	if err != nil {
		return nil, pg.MapError(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	return out, pg.MapError(err)
}

func getSession(ctx context.Context, db pg.Querier, id string) (Session, error) {
	s, err := scanSession(db.QueryRow(ctx, sqlGetSession, id))
	if errors.Is(err, pg.ErrNotFound) {
		return Session{}, errSessionNotFound
	}
	return s, err
}

func missingChunks(ctx context.Context, db pg.Querier, id string, count, limit int) ([]int, error) {
	rows, err := db.Query(ctx, sqlMissingChunks, id, count, limit)
	if err != nil {
		return nil, pg.MapError(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	return out, pg.MapError(err)
}

// chunkStoredAndHash says whether chunk n is recorded and where the
// running hash stands (hashed -1 and state nil: no running hash row).
func chunkStoredAndHash(ctx context.Context, db pg.Querier, id string, n int) (stored bool, hashed int, state []byte, err error) {
	err = pg.MapError(db.QueryRow(ctx, sqlChunkStoredAndHash, id, n).Scan(&stored, &hashed, &state))
	return stored, hashed, state, err
}

func chunkStored(ctx context.Context, db pg.Querier, id string, n int) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, sqlChunkStored, id, n).Scan(&ok)
	return ok, pg.MapError(err)
}

// storeChunk records chunk n; false when the session is no longer open (or
// the chunk was already recorded).
func storeChunk(ctx context.Context, db pg.Querier, id string, n int, size int64, sha *string) (bool, error) {
	var got int
	err := pg.MapError(db.QueryRow(ctx, sqlStoreChunk, id, n, size, sha).Scan(&got))
	if errors.Is(err, pg.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func recordStore(ctx context.Context, db pg.Querier, location string) (id, previous string, err error) {
	err = db.QueryRow(ctx, sqlRecordStore, location).Scan(&id, &previous)
	return id, previous, pg.MapError(err)
}

// upsertBlob announces blob sha with size and returns the size on record.
func upsertBlob(ctx context.Context, db pg.Querier, sha string, size int64) (int64, error) {
	var recorded int64
	err := db.QueryRow(ctx, sqlUpsertBlob, sha, size).Scan(&recorded)
	return recorded, pg.MapError(err)
}

// markCompleted moves an open session to completed; ErrNotFound when it is
// no longer open.
func markCompleted(ctx context.Context, db pg.Querier, id string) (Session, error) {
	return scanSession(db.QueryRow(ctx, sqlMarkCompleted, id))
}

func markFailed(ctx context.Context, db pg.Querier, id, failure string) (bool, error) {
	tag, err := db.Exec(ctx, sqlMarkFailed, id, failure)
	return tag.RowsAffected() == 1, pg.MapError(err)
}

// abortSession ends an open or completed session; ErrNotFound otherwise.
func abortSession(ctx context.Context, db pg.Querier, id string) (Session, error) {
	return scanSession(db.QueryRow(ctx, sqlAbort, id))
}

// referenceBlob raises a present blob's refs; ErrNotFound when it is being
// deleted or gone.
func referenceBlob(ctx context.Context, db pg.Querier, sha string) (int64, error) {
	var size int64
	err := db.QueryRow(ctx, sqlReferenceBlob, sha).Scan(&size)
	return size, pg.MapError(err)
}

func markCommitted(ctx context.Context, db pg.Querier, id, fileID string) (bool, error) {
	tag, err := db.Exec(ctx, sqlMarkCommitted, id, fileID)
	return tag.RowsAffected() == 1, pg.MapError(err)
}

// insertFileStmt is sqlInsertFile rewritten to $n once (pg.MustNamed).
var insertFileStmt = pg.MustNamed(sqlInsertFile)

func insertFile(ctx context.Context, db pg.Querier, f File) (File, error) {
	return scanFile(db.QueryRow(ctx, insertFileStmt.SQL, insertFileStmt.Args(pgx.NamedArgs{
		"id":          f.ID,
		"owner":       f.Owner,
		"name":        f.Name,
		"metadata":    f.Metadata,
		"blob_sha256": f.SHA256,
		"size":        f.Size,
		"session_id":  f.SessionID,
		"job_id":      f.JobID,
	})...))
}

func getFile(ctx context.Context, db pg.Querier, id string) (File, error) {
	f, err := scanFile(db.QueryRow(ctx, sqlGetFile, id))
	if errors.Is(err, pg.ErrNotFound) {
		return File{}, errFileNotFound
	}
	return f, err
}

// SQLPublish is the publish statement as the product runs it. It is
// exported for one reader: the lab's naive processing run (lab/upload)
// runs this very statement without the fenced completion that commits
// with it in the product, so the naive version differs from the product
// by the fence guard alone (UP-F3).
const SQLPublish = sqlPublish

// publish marks a processing file published; ErrNotFound when it is not
// processing (already published).
func publish(ctx context.Context, db pg.Querier, id string, sum Summary, fence int64, by string) (File, error) {
	b, err := json.Marshal(sum)
	if err != nil {
		return File{}, err
	}
	return scanFile(db.QueryRow(ctx, sqlPublish, id, sum.ContentType, b, fence, by))
}

func collectStrings(ctx context.Context, db pg.Querier, sql string, args ...any) ([]string, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, pg.MapError(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, pg.MapError(err)
}

func expireSessions(ctx context.Context, db pg.Querier, grace time.Duration, limit int) ([]string, error) {
	return collectStrings(ctx, db, sqlExpireSessions, grace.Microseconds(), limit)
}

func purgeSessions(ctx context.Context, db pg.Querier, retention time.Duration, limit int) (int, error) {
	tag, err := db.Exec(ctx, sqlPurgeSessions, retention.Microseconds(), limit)
	return int(tag.RowsAffected()), pg.MapError(err)
}

// GrowthProbes are the upload GC's statements whose cost must not grow
// with the history of sessions (plan tests, bench growth).
func GrowthProbes(retention time.Duration) []pg.Probe {
	return []pg.Probe{{Name: "upload.gc session purge batch", When: pg.Periodic, SQL: sqlPurgeSessions,
		Args: []any{retention.Microseconds(), gcBatch}, Bound: pg.Batch(gcBatch)}}
}

func markBlobsDeleting(ctx context.Context, db pg.Querier, grace time.Duration, limit int) ([]string, error) {
	return collectStrings(ctx, db, sqlMarkBlobsDeleting, grace.Microseconds(), limit)
}

func deletingBlobs(ctx context.Context, db pg.Querier, limit int) ([]string, error) {
	return collectStrings(ctx, db, sqlDeletingBlobs, limit)
}

func lockDeleting(ctx context.Context, tx pgx.Tx, sha string) (bool, error) {
	var got string
	err := pg.MapError(tx.QueryRow(ctx, sqlLockDeleting, sha).Scan(&got))
	if errors.Is(err, pg.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func deleteBlobRow(ctx context.Context, tx pgx.Tx, sha string) error {
	_, err := tx.Exec(ctx, sqlDeleteBlob, sha)
	return pg.MapError(err)
}

func unknownBlobs(ctx context.Context, db pg.Querier, shas []string) ([]string, error) {
	return collectStrings(ctx, db, sqlUnknownBlobs, shas)
}

func tombstone(ctx context.Context, db pg.Querier, info blobInfo) (bool, error) {
	tag, err := db.Exec(ctx, sqlTombstone, info.SHA256, info.Size, info.ModTime)
	return tag.RowsAffected() == 1, pg.MapError(err)
}

func closedPartials(ctx context.Context, db pg.Querier, sessions []string) ([]string, error) {
	return collectStrings(ctx, db, sqlClosedPartials, sessions)
}

// GC's scan cursors (gcscan.go): the last name examined in the blob and
// the partial directory, in upload_store's one row.
const (
	sqlGCCursor = `
SELECT CASE $1::text WHEN 'blobs' THEN gc_blobs_after ELSE gc_partials_after END
  FROM upload_store WHERE name = 'local'`
	sqlSetGCCursor = `
UPDATE upload_store
   SET gc_blobs_after    = CASE $1::text WHEN 'blobs' THEN $2 ELSE gc_blobs_after END,
       gc_partials_after = CASE $1::text WHEN 'blobs' THEN gc_partials_after ELSE $2 END
 WHERE name = 'local'`
)

func gcCursor(ctx context.Context, db pg.Querier, which string) (string, error) {
	var after string
	err := pg.MapError(db.QueryRow(ctx, sqlGCCursor, which).Scan(&after))
	if errors.Is(err, pg.ErrNotFound) {
		return "", nil
	}
	return after, err
}

func setGCCursor(ctx context.Context, db pg.Querier, which, after string) error {
	_, err := db.Exec(ctx, sqlSetGCCursor, which, after)
	return pg.MapError(err)
}
