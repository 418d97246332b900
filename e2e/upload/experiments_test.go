// Package upload_test runs the upload chapter's experiments against the
// real app, real PostgreSQL, a real blob directory and, for the crash, a
// real `fencelab serve` process.
package upload_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

// UP-01: a file's chunks arrive in random order, four at a time, and a
// third of them twice; one retransmit carries different bytes. Every
// retransmit of the same bytes is a 200, the different one a 409 that
// changes nothing, and the completed, committed, published file is the
// original byte for byte.
func TestUP01ChunksInRandomOrderWithRetransmitsMakeTheDeclaredFile(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{})
	const chunkSize = 256 << 10
	data, digest := payload(1, 5<<20+12345) // 21 chunks, the last one short
	parts := chunks(data, chunkSize)
	s := l.open(t, l.alice, data, chunkSize, digest)
	require.Equal(t, len(parts), s.ChunkCount)
	require.EqualValues(t, chunkSize, s.ChunkSize)

	rng := rand.New(rand.NewPCG(1, 2))
	order := rng.Perm(len(parts))
	resend := map[int]bool{}
	for _, n := range order[:len(parts)/3] {
		resend[n] = true
	}
	type sent struct {
		n      int
		status int
		body   string
	}
	results := make(chan sent, 2*len(parts))
	next := make(chan int)
	var wg sync.WaitGroup
	errs := e2etest.NewErrors(len(parts))
	for range 4 {
		wg.Go(func() {
			for n := range next {
				r, err := l.Send(context.Background(), putReq(l.alice, s.ID, n, parts[n], nil))
				if err != nil {
					errs.Add(fmt.Errorf("chunk %d: %w", n, err))
					continue
				}
				results <- sent{n, r.Status, string(r.Body)}
			}
		})
	}
	for _, n := range order {
		next <- n
	}
	close(next)
	wg.Wait()
	errs.Check(t)                            // on the test goroutine
	for _, n := range rng.Perm(len(parts)) { // retransmits, after the originals, in another order
		if resend[n] {
			r := l.put(t, l.alice, s.ID, n, parts[n], map[string]string{"Content-SHA256": sha(parts[n])})
			results <- sent{n, r.Status, string(r.Body)}
		}
	}
	close(results)
	created, duplicates := 0, 0
	for r := range results {
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
			duplicates++
			require.True(t, resend[r.n], "chunk %d answered 200 without a retransmit", r.n)
		default:
			t.Fatalf("chunk %d: %d %s", r.n, r.status, r.body)
		}
	}
	require.Equal(t, len(parts), created, "each chunk stored exactly once")
	require.Equal(t, len(resend), duplicates, "each retransmit of the same bytes is an idempotent 200")

	// Different bytes for a stored chunk: 409, and the stored bytes stay.
	forged := bytes.Clone(parts[3])
	forged[100] ^= 0xff
	r := l.put(t, l.alice, s.ID, 3, forged, nil)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "chunk_conflict", r.Code())

	r = l.complete(t, l.alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &s)
	require.Equal(t, upload.SessionCompleted, s.State)
	again := l.complete(t, l.alice, s.ID)
	require.Equal(t, http.StatusOK, again.Status, "completing twice is idempotent: %s", again.Body)
	r = l.put(t, l.alice, s.ID, 0, parts[0], nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "session_not_open", r.Code())

	r = l.commit(t, l.alice, s.ID, "lab-notes.bin")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)
	retry := l.commit(t, l.alice, s.ID, "lab-notes.bin")
	require.Equal(t, http.StatusOK, retry.Status, "a retried commit returns the same file: %s", retry.Body)
	var f2 upload.File
	retry.JSON(t, &f2)
	require.Equal(t, f.ID, f2.ID)
	l.publish(t, f)

	got := l.read(t, l.alice, f.ID, nil)
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	require.True(t, bytes.Equal(data, got.Body), "the file read back is the file sent")
	require.Equal(t, `"`+digest+`"`, got.Header.Get("ETag"))
	onDisk, err := os.ReadFile(l.store.BlobPath(digest))
	require.NoError(t, err)
	require.Equal(t, digest, sha(onDisk))
	require.False(t, l.partialExists(s.ID), "the partial file became the blob")

	require.Equal(t, len(parts), l.count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1`, s.ID))
	require.Equal(t, 1, l.count(t, `SELECT refs FROM upload_blob WHERE sha256 = $1`, digest))
	t.Logf("UP-01: %d chunks in random order, %d stored, %d retransmits answered 200, 1 forged retransmit 409", len(parts), created, duplicates)
	e2etest.Assert(t, l.Pool, "upload")
}

// UP-03: a processing run's lease lapses mid-run (forced with SQL), a
// second runner takes the job over, and the first wakes up. Whether it
// wakes after its successor published or before, it cannot publish: its
// completion carries a superseded fence, and its publish rolls back with
// it. The file is published once, by the second runner's fence.
func TestUP03ProcessingLeaseExpiresSecondRunnerTakesOverOnePublish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		firstWakesUp string // "after" or "before" the second runner publishes
	}{
		{"first run wakes after the takeover published", "after"},
		{"first run wakes before the takeover publishes", "before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, opts{})
			ctx := context.Background()
			data, _ := payload(3, 300<<10)
			f := l.committed(t, l.alice, data, 64<<10, "report.bin")
			key := itoa(int(f.JobID))

			// Runner A claims and pauses after its work, before publishing.
			gateA := l.Faults.Pause(faults.BeforeCommit, key)
			a := l.claimProcess(t, "runner-a", f.JobID)
			errA := make(chan error, 1)
			go func() { errA <- l.Deps.Jobs.Execute(ctx, a) }()
			<-gateA.Reached()

			// Its lease lapses; recovery raises the fence; runner B claims.
			l.exec(t, `UPDATE job SET lease_until = now() - interval '1 second' WHERE id = $1`, f.JobID)
			rec, err := l.Deps.Jobs.RecoverExpired(ctx, 10, 0)
			require.NoError(t, err)
			require.Len(t, rec, 1)
			l.exec(t, `UPDATE job SET due_at = now() WHERE id = $1`, f.JobID) // skip the re-dispatch jitter
			b := l.claimProcess(t, "runner-b", f.JobID)
			require.Greater(t, b.Fence, a.Fence)

			switch tc.firstWakesUp {
			case "after":
				require.NoError(t, l.Deps.Jobs.Execute(ctx, b), "runner B publishes")
				gateA.Release()
				require.ErrorIs(t, <-errA, claim.ErrStaleFence, "runner A's late publish is refused")
			case "before":
				gateB := l.Faults.Pause(faults.BeforeCommit, key)
				errB := make(chan error, 1)
				go func() { errB <- l.Deps.Jobs.Execute(ctx, b) }()
				<-gateB.Reached()
				gateA.Release()
				require.ErrorIs(t, <-errA, claim.ErrStaleFence, "runner A is refused by its fence, not by the file's state")
				require.Equal(t, "processing", l.fileState(t, f.ID), "A's publish rolled back")
				gateB.Release()
				require.NoError(t, <-errB, "runner B publishes")
			}

			var state, by string
			var fence int64
			require.NoError(t, l.Pool.QueryRow(ctx, `SELECT state, published_by, published_fence FROM file_object WHERE id = $1`, f.ID).
				Scan(&state, &by, &fence))
			require.Equal(t, "published", state)
			require.Equal(t, "runner-b", by)
			require.Equal(t, b.Fence, fence)
			require.Equal(t, 1, l.count(t, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'succeeded'`, f.JobID))
			require.Positive(t, l.count(t, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'rejected_stale' AND owner = 'runner-a'`, f.JobID),
				"runner A's refused write is on record")
			require.Equal(t, http.StatusOK, l.read(t, l.alice, f.ID, nil).Status)
			e2etest.Assert(t, l.Pool, "upload", "claim")
		})
	}
}

func (l *lab) fileState(t *testing.T, id string) string {
	t.Helper()
	var st string
	require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT state FROM file_object WHERE id = $1`, id).Scan(&st))
	return st
}

// UP-04: a committed file is not readable until processing publishes it:
// the read is a 409 not_ready problem, not a byte of the file. Once
// published it streams with ETag = sha256, Range and conditional requests;
// it is its owner's alone.
func TestUP04ReadBeforePublishIs409NotReady(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{})
	data, digest := payload(4, 1<<20)
	f := l.committed(t, l.alice, data, 256<<10, "photo.raw")

	r := l.read(t, l.alice, f.ID, nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "not_ready", r.Code())
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	require.False(t, bytes.Contains(r.Body, data[:64]), "no bytes of the file in the answer")
	r = l.read(t, l.alice, f.ID, map[string]string{"Range": "bytes=0-99"})
	require.Equal(t, http.StatusConflict, r.Status, "a range of an unpublished file is no different")

	l.publish(t, f)
	r = l.read(t, l.alice, f.ID, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, data, r.Body)
	etag := r.Header.Get("ETag")
	require.Equal(t, `"`+digest+`"`, etag)
	require.Equal(t, "bytes", r.Header.Get("Accept-Ranges"))

	r = l.read(t, l.alice, f.ID, map[string]string{"Range": "bytes=1000-1999"})
	require.Equal(t, http.StatusPartialContent, r.Status)
	require.Equal(t, data[1000:2000], r.Body)
	require.Equal(t, "bytes 1000-1999/1048576", r.Header.Get("Content-Range"))
	r = l.read(t, l.alice, f.ID, map[string]string{"If-None-Match": etag})
	require.Equal(t, http.StatusNotModified, r.Status)
	r = l.read(t, l.alice, f.ID, map[string]string{"Range": "bytes=2000000-"})
	require.Equal(t, http.StatusRequestedRangeNotSatisfiable, r.Status)

	r = l.read(t, l.bob, f.ID, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "another user's file")
	var info upload.File
	r = l.Do(t, e2etest.Req{Method: "GET", Path: "/upload/files/" + f.ID + "/info", Token: l.alice})
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &info)
	require.Equal(t, upload.FilePublished, info.State)
	require.Equal(t, "application/octet-stream", info.ContentType)
	require.EqualValues(t, len(data), info.Summary.Bytes)
	require.Equal(t, "1.0 MiB", info.Summary.Human)
	e2etest.Assert(t, l.Pool, "upload")
}

// UP-05: the client declares a SHA-256 its bytes do not have. Every chunk
// is accepted (no chunk can know), completion fails with 422
// sha256_mismatch, the session is failed, and nothing references the
// bytes: no blob row, no blob file, no file_object, no partial file.
func TestUP05WrongDeclaredSHA256FailsCompletionNothingReferenced(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{})
	data, actual := payload(5, 700<<10)
	declared := sha([]byte("some other file"))
	s := l.open(t, l.alice, data, 128<<10, declared)
	for n, c := range chunks(data, 128<<10) {
		require.Equal(t, http.StatusCreated, l.put(t, l.alice, s.ID, n, c, nil).Status)
	}
	require.Equal(t, s.ChunkCount, l.count(t, `SELECT hashed_chunks FROM upload_hash WHERE session_id = $1`, s.ID),
		"chunks sent in order were hashed as they arrived; complete only checks the digest")
	r := l.complete(t, l.alice, s.ID)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "sha256_mismatch", r.Code())
	require.Equal(t, upload.SessionFailed, l.sessionState(t, s.ID))

	r = l.complete(t, l.alice, s.ID)
	require.Equal(t, http.StatusConflict, r.Status, "a failed session stays failed")
	r = l.commit(t, l.alice, s.ID, "never.bin")
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "session_not_open", r.Code())

	l.nothingReferenced(t, declared)
	l.nothingReferenced(t, actual)
	require.Empty(t, l.blobFiles(t))
	require.False(t, l.partialExists(s.ID), "the failed bytes are removed")
	require.Zero(t, l.count(t, `SELECT count(*) FROM file_object`))
	e2etest.Assert(t, l.Pool, "upload")
}
