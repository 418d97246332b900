package upload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
)

const chapter = "upload"

// Bounds of UP-F1's file check, so `fencelab check` stays cheap on a large
// store: every referenced blob is stat'ed, at most checkHashBlobs blobs
// (and checkHashBytes bytes) are re-hashed per run — the most recently
// written and a random few — and at most checkScanEntries names of the
// blob directory are looked at.
const (
	checkHashBlobs   = 8
	checkHashBytes   = 1 << 30
	checkScanEntries = 100_000
)

// The invariants of chapter 13 ("Chunked upload").
var Invariants = []invariant.Invariant{

	{
		ID: "UP-F1", Module: "upload", Chapter: chapter,
		Statement: "bytes neither lost nor wrong: every file at blobs/sha256/<hex> hashes to <hex> " +
			"(checked for a bounded sample per run); every blob referenced by file_object exists",
		Check: checkBlobFiles,
	},
	{
		ID: "UP-F2", Module: "upload", Chapter: chapter,
		Statement: "orphans are reclaimable and only orphans are reclaimed: refs count the file_object rows, " +
			"a referenced blob is never being deleted, and committed sessions and files name each other " +
			"(GC after the grace period: TestUP02)",
		SQL: `
SELECT 'refs differ from the file_object rows naming the blob' AS problem, b.sha256 AS subject,
       b.refs || ' recorded, ' || coalesce(f.n, 0) || ' rows' AS detail
  FROM upload_blob b
  LEFT JOIN (SELECT blob_sha256, count(*) AS n FROM file_object GROUP BY blob_sha256) f ON f.blob_sha256 = b.sha256
 WHERE b.refs <> coalesce(f.n, 0)
UNION ALL
SELECT 'referenced blob is being deleted', sha256, state FROM upload_blob WHERE refs > 0 AND state <> 'present'
UNION ALL
SELECT 'committed session without its file', s.id::text, coalesce(s.file_id::text, '')
  FROM upload_session s
 WHERE s.state = 'committed'
   AND NOT EXISTS (SELECT 1 FROM file_object f WHERE f.id = s.file_id AND f.session_id = s.id)
UNION ALL
SELECT 'file of a session that is not committed to it', f.id::text, s.state
  FROM file_object f JOIN upload_session s ON s.id = f.session_id
 WHERE s.state <> 'committed' OR s.file_id IS DISTINCT FROM f.id`,
	},
	{
		ID: "UP-F3", Module: "upload", Chapter: chapter,
		Statement: "processing runs under a lease with a fence; a superseded run cannot publish; a file is published exactly once",
		// A publish commits with its job's fenced completion, so a
		// published file's job succeeded under the very fence and owner
		// recorded on the file, and no claim came after it.
		SQL: `
SELECT 'published, but not by the run that completed its job' AS problem, f.id::text AS file,
       f.published_fence AS fence, f.published_by AS run, j.fence AS job_fence, coalesce(j.owner, '') AS job_owner, j.state AS job_state
  FROM file_object f LEFT JOIN job_all j ON j.id = f.job_id
 WHERE f.state = 'published'
   AND (j.id IS NULL OR j.state <> 'succeeded' OR j.fence <> f.published_fence OR j.owner IS DISTINCT FROM f.published_by)
UNION ALL
SELECT 'published by a superseded run (a later claim exists)', f.id::text, f.published_fence, f.published_by, e.fence, e.owner, 'claimed'
  FROM file_object f JOIN job_event e ON e.job_id = f.job_id AND e.event = 'claimed' AND e.fence > f.published_fence
 WHERE f.state = 'published'
UNION ALL
SELECT 'processing job succeeded, file not published', f.id::text, NULL, NULL, j.fence, coalesce(j.owner, ''), j.state
  FROM file_object f JOIN job_all j ON j.id = f.job_id
 WHERE j.state = 'succeeded' AND f.state <> 'published'
UNION ALL
SELECT 'file without its processing job', f.id::text, NULL, NULL, NULL, NULL, NULL
  FROM file_object f
 WHERE NOT EXISTS (SELECT 1 FROM job_all j WHERE j.id = f.job_id AND j.kind = '` + KindProcess + `' AND j.business_key = f.id::text)`,
	},
	{
		ID: "UP-F4", Module: "upload", Chapter: chapter,
		Statement: "a file is readable only once published; earlier reads get 409 not_ready, never partial bytes " +
			"(the 409 is measured by TestUP04; here: every readable file is a complete, present blob)",
		SQL: `
SELECT 'published file whose blob is not complete and present' AS problem, f.id::text AS file,
       f.size AS size, b.size AS blob_size, coalesce(b.state, 'missing') AS blob_state
  FROM file_object f LEFT JOIN upload_blob b ON b.sha256 = f.blob_sha256
 WHERE f.state = 'published' AND (b.sha256 IS NULL OR b.size <> f.size OR b.state <> 'present')
UNION ALL
SELECT 'published before it was committed', f.id::text, f.size, NULL, NULL
  FROM file_object f WHERE f.published_at < f.created_at`,
	},
	{
		ID: "UP-F5", Module: "upload", Chapter: chapter,
		Statement: "the completed file's size and SHA-256 equal the declared ones, or completion fails and nothing is referenced",
		SQL: `
SELECT 'completed session whose blob is not the declared one' AS problem, s.id::text AS subject, coalesce(s.blob_sha256, '') AS detail
  FROM upload_session s
 WHERE s.state IN ('completed', 'committed') AND s.blob_sha256 IS DISTINCT FROM s.sha256
UNION ALL
SELECT 'blob size differs from a declaration that names it', s.id::text, b.size || ' bytes, ' || s.total_size || ' declared'
  FROM upload_session s JOIN upload_blob b ON b.sha256 = s.blob_sha256
 WHERE b.size <> s.total_size
UNION ALL
SELECT 'file differs from its session''s declaration', f.id::text, f.blob_sha256 || ' / ' || f.size
  FROM file_object f JOIN upload_session s ON s.id = f.session_id
 WHERE f.blob_sha256 <> s.sha256 OR f.size <> s.total_size
UNION ALL
SELECT 'failed session references bytes', s.id::text, coalesce(s.blob_sha256, s.file_id::text, 'a file_object')
  FROM upload_session s
 WHERE s.state = 'failed'
   AND (s.blob_sha256 IS NOT NULL OR s.file_id IS NOT NULL OR EXISTS (SELECT 1 FROM file_object f WHERE f.session_id = s.id))
UNION ALL
SELECT 'completed without every chunk', s.id::text, count(c.n) || ' of ' || s.chunk_count
  FROM upload_session s LEFT JOIN upload_chunk c ON c.session_id = s.id
 WHERE s.state IN ('completed', 'committed')
 GROUP BY s.id, s.chunk_count HAVING count(c.n) <> s.chunk_count
UNION ALL
SELECT 'chunk outside the declared layout', c.session_id::text, 'chunk ' || c.n || ': ' || c.size || ' bytes'
  FROM upload_chunk c JOIN upload_session s ON s.id = c.session_id
 WHERE c.n >= s.chunk_count OR c.size <> least(s.chunk_size, s.total_size - c.n::bigint * s.chunk_size)`,
	},
}

// checkBlobFiles is UP-F1: it reads the blob directory recorded in
// upload_store. Referenced blobs must exist with their recorded size; a
// bounded sample of blob files is re-hashed; every name in the blob
// directory must be a content address (temporary files never live there).
func checkBlobFiles(ctx context.Context, db pg.Querier) ([]string, [][]any, error) {
	cols := []string{"problem", "sha256", "detail"}
	var rows [][]any
	bad := func(problem, sha, detail string) { rows = append(rows, []any{problem, sha, detail}) }

	var location string
	err := pg.MapError(db.QueryRow(ctx, `SELECT location FROM upload_store WHERE name = 'local'`).Scan(&location))
	if errors.Is(err, pg.ErrNotFound) {
		// No blob has been written through a store yet: nothing on disk to check.
		var blobs int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM upload_blob`).Scan(&blobs); err != nil {
			return nil, nil, err
		}
		if blobs > 0 {
			bad("blobs recorded but no store location in upload_store", "", fmt.Sprintf("%d blobs", blobs))
		}
		return cols, rows, nil
	}
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(location, "blobs", "sha256")
	if _, err := os.Stat(dir); err != nil {
		bad("blob directory not readable from this process", "", err.Error())
		return cols, rows, nil
	}
	path := func(sha string) string { return filepath.Join(dir, sha) }

	// Every referenced blob exists, with its recorded size. Read in keyset
	// pages of checkPage rows (primary-key order), each page checked
	// before the next is read: memory stays one page, whatever the store
	// holds.
	after := ""
	for {
		page, err := referencedPage(ctx, db, after)
		if err != nil {
			return nil, nil, err
		}
		for _, b := range page {
			st, err := os.Stat(path(b.sha))
			switch {
			case err != nil:
				bad("referenced blob missing", b.sha, err.Error())
			case st.Size() != b.size:
				bad("referenced blob has the wrong size", b.sha, fmt.Sprintf("%d bytes, %d recorded", st.Size(), b.size))
			}
		}
		if len(page) < checkPage {
			break
		}
		after = page[len(page)-1].sha
	}

	// A sample of blob files hashes to its name.
	sample, err := db.Query(ctx, `
(SELECT sha256 FROM upload_blob WHERE state = 'present' ORDER BY touched_at DESC LIMIT $1)
UNION
(SELECT sha256 FROM upload_blob WHERE state = 'present' ORDER BY random() LIMIT $1)`, checkHashBlobs/2)
	if err != nil {
		return nil, nil, err
	}
	var shas []string
	for sample.Next() {
		var sha string
		if err := sample.Scan(&sha); err != nil {
			sample.Close()
			return nil, nil, err
		}
		shas = append(shas, sha)
	}
	sample.Close()
	if err := sample.Err(); err != nil {
		return nil, nil, err
	}
	budget := int64(checkHashBytes)
	for _, sha := range shas {
		if budget <= 0 {
			break
		}
		got, n, err := hashFile(path(sha))
		budget -= n
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Announced, not renamed yet (in flight), or an unreferenced
			// one whose rename never happened: not a wrong byte.
		case err != nil:
			bad("blob unreadable", sha, err.Error())
		case got != sha:
			bad("blob does not hash to its name", sha, "hashes to "+got)
		}
	}

	// Only content addresses live in the blob directory.
	scanned := 0
	errStop := errors.New("stop")
	err = eachEntry(ctx, dir, func(name string, _ fs.FileInfo) error {
		if scanned++; scanned > checkScanEntries {
			return errStop
		}
		if checkHex(name) != nil {
			bad("file in the blob directory is not a content address", name, "")
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, nil, err
	}
	return cols, rows, nil
}

// checkPage is the keyset page checkBlobFiles reads referenced blobs in.
const checkPage = 1000

type blobRef struct {
	sha  string
	size int64
}

// referencedPage is the next page of referenced blobs after the sha256
// after, in primary-key order.
func referencedPage(ctx context.Context, db pg.Querier, after string) ([]blobRef, error) {
	rows, err := db.Query(ctx, `SELECT sha256, size FROM upload_blob WHERE refs > 0 AND sha256 > $1 ORDER BY sha256 LIMIT $2`,
		after, checkPage)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (blobRef, error) {
		var b blobRef
		err := r.Scan(&b.sha, &b.size)
		return b, err
	})
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
