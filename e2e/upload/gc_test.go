package upload_test

import (
	"context"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/e2e/e2etest"
	uploadlab "github.com/fencelab/fencelab/lab/upload"
	"github.com/fencelab/fencelab/services/upload"
)

var oneHour = map[string]string{upload.EnvGrace: "1h"}

// age moves every blob's and session's last activity past the grace period.
func age(t *testing.T, l *uploadlab.Lab, tables ...string) {
	t.Helper()
	for _, table := range tables {
		l.Exec(t, `UPDATE `+table+` SET touched_at = now() - interval '2 hours'`)
	}
}

// UP-F2, one side of the race: a commit is inside its transaction (paused
// before COMMIT) with the blob's row locked, and GC runs with the blob past
// its grace period. GC passes over the locked row; the commit lands; GC
// never removes the now referenced blob.
func TestGCPassesOverABlobACommitIsReferencing(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{Settings: oneHour})
	data, digest := uploadlab.Payload(8, 256<<10)
	s := l.UploadAll(t, l.Alice, data, 64<<10)
	age(t, l, "upload_blob")

	gate := l.Faults.Pause(faults.BeforeCommit, s.ID)
	committed := l.Go(uploadlab.CommitReq(l.Alice, s.ID, "race.bin"))
	<-gate.Reached()
	require.Equal(t, upload.GCReport{}, l.Gc(t), "GC skips the row a commit holds")
	require.FileExists(t, l.Store.BlobPath(digest))
	gate.Release()
	r := committed.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)

	age(t, l, "upload_blob")
	require.Equal(t, upload.GCReport{}, l.Gc(t), "a referenced blob is never reclaimed")
	l.Publish(t, f)
	require.Equal(t, data, l.Read(t, l.Alice, f.ID, nil).Body)
	e2etest.Assert(t, l.Pool, "upload")
}

// UP-F2, the other side: GC has decided — the blob is marked 'deleting'
// (committed) and GC is paused before the unlink — when the commit
// arrives. The commit's conditional UPDATE finds no 'present' row and is
// refused with 410 upload_expired; nothing references the reclaimed bytes.
func TestCommitAfterGCDecidedIsRefused(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{Settings: oneHour})
	data, digest := uploadlab.Payload(9, 256<<10)
	s := l.UploadAll(t, l.Alice, data, 64<<10)
	age(t, l, "upload_blob")

	gate := l.Faults.Pause(faults.BeforeUnlink, digest)
	collected := l.Go(l.GcReq())
	<-gate.Reached()
	require.FileExists(t, l.Store.BlobPath(digest), "decided, not yet unlinked")
	r := l.Commit(t, l.Alice, s.ID, "late.bin")
	require.Equal(t, http.StatusGone, r.Status, string(r.Body))
	require.Equal(t, "upload_expired", r.Code())
	gate.Release()
	require.Equal(t, upload.GCReport{BlobsReclaimed: 1}, uploadlab.GCReportOf(t, collected.Wait(t)))
	l.NothingReferenced(t, digest)
	require.Equal(t, upload.SessionCompleted, l.SessionState(t, s.ID), "the refused commit changed nothing")
	e2etest.Assert(t, l.Pool, "upload")
}

// A completion of the same bytes arrives while GC is unlinking the old
// copy: it waits for GC's row lock, then announces a fresh row and renames
// its own file into place. The blob exists after both, and commits.
func TestCompletionOfTheSameBytesWaitsForGCThenRewritesThem(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{Settings: oneHour})
	data, digest := uploadlab.Payload(10, 200<<10)
	first := l.UploadAll(t, l.Alice, data, 50<<10)
	require.Equal(t, http.StatusOK, l.Do(t, e2etest.Req{Method: "DELETE", Path: "/upload/sessions/" + first.ID, Token: l.Alice}).Status)
	age(t, l, "upload_blob")

	second := l.Open(t, l.Bob, data, 50<<10, digest)
	for n, c := range uploadlab.Chunks(data, 50<<10) {
		require.Equal(t, http.StatusCreated, l.Put(t, l.Bob, second.ID, n, c, nil).Status)
	}
	gate := l.Faults.Pause(faults.BeforeUnlink, digest)
	collected := l.Go(l.GcReq())
	<-gate.Reached()
	completed := l.Go(uploadlab.CompleteReq(l.Bob, second.ID))
	e2etest.WaitForLockWaiters(t, l.Pool, "INSERT INTO upload_blob", 1)
	gate.Release()
	require.Equal(t, 1, uploadlab.GCReportOf(t, collected.Wait(t)).BlobsReclaimed)
	r := completed.Wait(t)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))

	onDisk, err := os.ReadFile(l.Store.BlobPath(digest))
	require.NoError(t, err, "the second completion's bytes are in place")
	require.Equal(t, digest, uploadlab.SHA256Hex(onDisk))
	r = l.Commit(t, l.Bob, second.ID, "again.bin")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e2etest.Assert(t, l.Pool, "upload")
}

// Abandoned and aborted sessions, and files nobody announced, are
// reclaimed after the grace period; young ones are left alone.
func TestAbandonedSessionsAndStrayFilesAreReclaimed(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{Settings: oneHour})
	ctx := context.Background()

	data, digest := uploadlab.Payload(11, 100<<10)
	idle := l.Open(t, l.Alice, data, 50<<10, digest)
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, idle.ID, 0, data[:50<<10], nil).Status)
	require.True(t, l.PartialExists(idle.ID))

	aborted := l.UploadAll(t, l.Alice, []byte("aborted after completion"), 8)
	r := l.Do(t, e2etest.Req{Method: "DELETE", Path: "/upload/sessions/" + aborted.ID, Token: l.Alice})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = l.Put(t, l.Alice, aborted.ID, 0, []byte("aborted "), nil)
	require.Equal(t, http.StatusGone, r.Status)
	require.Equal(t, "session_gone", r.Code())

	strayPartial := uuid.NewString()
	require.NoError(t, os.WriteFile(l.Store.PartialPath(strayPartial), []byte("left by a crash"), 0o640))
	oldStray, oldDigest := uploadlab.Payload(12, 1000)
	youngStray, youngDigest := uploadlab.Payload(13, 1000)
	require.NoError(t, os.WriteFile(l.Store.BlobPath(oldDigest), oldStray, 0o640))
	require.NoError(t, os.WriteFile(l.Store.BlobPath(youngDigest), youngStray, 0o640))
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(l.Store.BlobPath(oldDigest), old, old))

	rep := l.Gc(t)
	require.Equal(t, upload.GCReport{StrayPartials: 1, StrayBlobs: 1, BlobsReclaimed: 1}, rep,
		"inside the grace period only files nobody announced, older than it, go")
	require.NoFileExists(t, l.Store.PartialPath(strayPartial))
	require.NoFileExists(t, l.Store.BlobPath(oldDigest))
	require.FileExists(t, l.Store.BlobPath(youngDigest))
	require.True(t, l.PartialExists(idle.ID))

	age(t, l, "upload_blob", "upload_session")
	rep = l.Gc(t)
	require.Equal(t, upload.GCReport{SessionsExpired: 1, BlobsReclaimed: 1}, rep)
	require.Equal(t, upload.SessionExpired, l.SessionState(t, idle.ID))
	require.False(t, l.PartialExists(idle.ID))
	require.Equal(t, upload.SessionAborted, l.SessionState(t, aborted.ID))
	require.NoFileExists(t, l.Store.BlobPath(uploadlab.SHA256Hex([]byte("aborted after completion"))))
	r = l.Put(t, l.Alice, idle.ID, 1, data[50<<10:], nil)
	require.Equal(t, http.StatusGone, r.Status)

	_, err := l.Store.StatBlob(ctx, youngDigest)
	require.NoError(t, err)
	e2etest.Assert(t, l.Pool, "upload")

	// Past FENCELAB_UPLOAD_SESSION_RETENTION (an exact boundary set with
	// SQL, not a sleep), sessions that ended without a file go with their
	// chunk and hash rows; a committed one stays.
	l.Exec(t, `UPDATE upload_session SET ended_at = now() - interval '8 days' WHERE ended_at IS NOT NULL`)
	require.Positive(t, l.Count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1`, idle.ID))
	rep = l.Gc(t)
	require.Equal(t, 2, rep.SessionsPurged, "the expired and the aborted session")
	require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_session WHERE id = ANY ($1::uuid[])`, []string{idle.ID, aborted.ID}))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1`, idle.ID))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_session WHERE state IN ('failed', 'aborted', 'expired')`))
	e2etest.Assert(t, l.Pool, "upload")
}

// A process that died after renaming the blob and before marking the
// session (UP-02's moment, simulated in-process) leaves the session open;
// the client's retried completion finds the bytes at their address and
// completes from them.
func TestCompleteRetriedAfterACrashFinishesFromTheBlob(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	data, digest := uploadlab.Payload(14, 300<<10)
	s := l.Open(t, l.Alice, data, 100<<10, digest)
	for n, c := range uploadlab.Chunks(data, 100<<10) {
		require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, n, c, nil).Status)
	}
	l.Faults.Fail(faults.AfterBytesWritten, s.ID)
	r := l.Do(t, faulted(uploadlab.CompleteReq(l.Alice, s.ID)))
	require.Equal(t, http.StatusInternalServerError, r.Status)
	require.Equal(t, upload.SessionOpen, l.SessionState(t, s.ID))
	require.FileExists(t, l.Store.BlobPath(digest))
	require.False(t, l.PartialExists(s.ID))
	e2etest.Assert(t, l.Pool, "upload")

	l.Faults.Disarm(faults.AfterBytesWritten)
	r = l.Complete(t, l.Alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = l.Commit(t, l.Alice, s.ID, "recovered.bin")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)
	l.Publish(t, f)
	require.Equal(t, data, l.Read(t, l.Alice, f.ID, nil).Body)
	e2etest.Assert(t, l.Pool, "upload")
}

// The invariants are not vacuous: each one reports the damage it exists
// to catch, and holds again once the damage is repaired.
func TestUploadInvariantsSeeTheDamageTheyGuardAgainst(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	ctx := context.Background()
	data, digest := uploadlab.Payload(15, 100<<10)
	f := l.Committed(t, l.Alice, data, 25<<10, "guarded.bin")
	l.Publish(t, f)
	e2etest.Assert(t, l.Pool, "upload")
	path := l.Store.BlobPath(digest)

	violated := func(id, problem string) {
		t.Helper()
		res := e2etest.Invariants().Run(ctx, l.Pool, id)
		require.Len(t, res, 1)
		require.NoError(t, res[0].Err)
		require.False(t, res[0].Holds(), "%s must report: %s", id, problem)
		var found bool
		for _, row := range res[0].Rows {
			found = found || strings.Contains(strings.ToLower(toString(row[0])), problem)
		}
		require.True(t, found, "%s rows %v lack %q", id, res[0].Rows, problem)
	}
	damage := func(id, problem string, breakIt, repair func()) {
		t.Helper()
		breakIt()
		violated(id, problem)
		repair()
		e2etest.Assert(t, l.Pool, "upload")
	}

	damage("UP-F1", "does not hash to its name",
		func() { flipByte(t, path, 500) }, func() { flipByte(t, path, 500) })
	damage("UP-F1", "referenced blob missing",
		func() { require.NoError(t, os.Rename(path, path+".away")) },
		func() { require.NoError(t, os.Rename(path+".away", path)) })
	damage("UP-F1", "not a content address",
		func() { require.NoError(t, os.WriteFile(path+".tmp", data, 0o640)) },
		func() { require.NoError(t, os.Remove(path+".tmp")) })
	damage("UP-F2", "refs differ",
		func() { l.Exec(t, `UPDATE upload_blob SET refs = 2`) }, func() { l.Exec(t, `UPDATE upload_blob SET refs = 1`) })
	damage("UP-F3", "not by the run that completed its job",
		func() { l.Exec(t, `UPDATE job_history SET fence = fence + 1 WHERE id = $1`, f.JobID) }, // its finished job
		func() { l.Exec(t, `UPDATE job_history SET fence = fence - 1 WHERE id = $1`, f.JobID) })
	damage("UP-F4", "not complete and present",
		func() { l.Exec(t, `UPDATE upload_blob SET size = size + 1`) }, func() { l.Exec(t, `UPDATE upload_blob SET size = size - 1`) })
	damage("UP-F5", "chunk outside the declared layout",
		func() { l.Exec(t, `UPDATE upload_chunk SET size = size + 1 WHERE n = 0`) },
		func() { l.Exec(t, `UPDATE upload_chunk SET size = size - 1 WHERE n = 0`) })
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, at)
	require.NoError(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, at)
	require.NoError(t, err)
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// A blob directory belongs to one database. A second database pointed at
// it (a misconfiguration) is refused before it writes a blob or sweeps:
// its GC would take the first database's blobs for stray files.
func TestABlobStoreServesOneDatabase(t *testing.T) {
	first := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	f := first.Committed(t, first.Alice, []byte("first database's file"), 8, "mine.txt")
	second := uploadlab.StartLab(e2etest.X(t), e2etest.Options{Settings: map[string]string{upload.EnvDir: first.Dir, upload.EnvGrace: "1s"}})
	s := second.Open(t, second.Alice, []byte("x"), 1, uploadlab.SHA256Hex([]byte("x")))
	require.Equal(t, http.StatusCreated, second.Put(t, second.Alice, s.ID, 0, []byte("x"), nil).Status)
	require.Equal(t, http.StatusInternalServerError, second.Do(t, faulted(uploadlab.CompleteReq(second.Alice, s.ID))).Status)
	r := second.Do(t, faulted(e2etest.Req{Method: "POST", Path: "/upload/gc", Token: second.Admin}))
	require.Equal(t, http.StatusInternalServerError, r.Status)
	require.FileExists(t, first.Store.BlobPath(f.SHA256))
	e2etest.Assert(t, first.Pool, "upload")
	e2etest.Assert(t, second.Pool, "upload")
}

// faulted marks a request whose test breaks the server on purpose: its 500
// is the expected answer, which no route's contract lists.
func faulted(r e2etest.Req) e2etest.Req {
	r.Fault = true
	return r
}

// One GC run examines a bounded window of each directory: the next
// FENCELAB_UPLOAD_GC_SCAN names after a cursor kept in upload_store, and
// the cursor wraps once a directory is exhausted. With a window of 3 over
// 8 blob files (a committed one, a young stray, six old strays) and 4 stray
// partial files, each run removes exactly the old strays of its window,
// and three runs cover both directories; the committed blob and the young
// stray (the rule for bytes being written now) are never touched.
func TestGCScansABoundedWindowPerRun(t *testing.T) {
	t.Parallel()
	const window = 3
	l := uploadlab.StartLab(e2etest.X(t), e2etest.Options{Settings: map[string]string{
		upload.EnvGrace: "1h", upload.EnvGCScan: strconv.Itoa(window)}})

	kept, keptDigest := uploadlab.Payload(20, 4096)
	f := l.Committed(t, l.Alice, kept, 4096, "kept.bin")
	old := time.Now().Add(-2 * time.Hour)
	young, youngDigest := uploadlab.Payload(21, 1000)
	require.NoError(t, os.WriteFile(l.Store.BlobPath(youngDigest), young, 0o640))
	strays := map[string]bool{}
	for i := range 6 {
		data, digest := uploadlab.Payload(uint64(30+i), 1000)
		require.NoError(t, os.WriteFile(l.Store.BlobPath(digest), data, 0o640))
		require.NoError(t, os.Chtimes(l.Store.BlobPath(digest), old, old))
		strays[digest] = true
	}
	partials := map[string]bool{}
	for range 4 {
		id := uuid.NewString()
		require.NoError(t, os.WriteFile(l.Store.PartialPath(id), []byte("left by a crash"), 0o640))
		partials[id] = true
	}
	blobNames := slices.Sorted(maps.Keys(strays))
	blobNames = append(blobNames, keptDigest, youngDigest)
	slices.Sort(blobNames)
	partialNames := slices.Sorted(maps.Keys(partials))

	// The expected report of each run, from the sorted names: the old
	// strays and the stray partials inside that run's window.
	windowOf := func(names []string, run int) []string {
		off := 0
		for range run { // the cursor wraps after a short window
			if off += window; off >= len(names) {
				off = 0
			}
		}
		return names[off:min(off+window, len(names))]
	}
	for run := range 3 {
		want := upload.GCReport{}
		for _, n := range windowOf(blobNames, run) {
			if strays[n] {
				want.StrayBlobs++
				want.BlobsReclaimed++
			}
		}
		if run < 2 { // the partial directory is covered in two runs; the third starts over on an empty one
			for _, n := range windowOf(partialNames, run) {
				if partials[n] {
					want.StrayPartials++
				}
			}
		}
		require.Equal(t, want, l.Gc(t), "run %d examines only its window", run+1)
	}
	for digest := range strays {
		require.NoFileExists(t, l.Store.BlobPath(digest))
	}
	for id := range partials {
		require.False(t, l.PartialExists(id))
	}
	require.FileExists(t, l.Store.BlobPath(keptDigest), "a committed blob is never reclaimed")
	require.FileExists(t, l.Store.BlobPath(youngDigest), "a blob younger than the grace period is never judged")
	require.Equal(t, 1, l.Count(t, `SELECT count(*) FROM upload_store WHERE gc_blobs_after = '' AND gc_partials_after = ''`),
		"both cursors wrapped after a short window")
	l.Publish(t, f)
	require.Equal(t, kept, l.Read(t, l.Alice, f.ID, nil).Body)
	e2etest.Assert(t, l.Pool, "upload")
}
