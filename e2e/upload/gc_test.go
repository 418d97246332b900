package upload_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

var oneHour = map[string]string{upload.EnvGrace: "1h"}

// age moves every blob's and session's last activity past the grace period.
func (l *lab) age(t *testing.T, tables ...string) {
	t.Helper()
	for _, table := range tables {
		l.exec(t, `UPDATE `+table+` SET touched_at = now() - interval '2 hours'`)
	}
}

// UP-F2, one side of the race: a commit is inside its transaction (paused
// before COMMIT) with the blob's row locked, and GC runs with the blob past
// its grace period. GC passes over the locked row; the commit lands; GC
// never removes the now referenced blob.
func TestGCPassesOverABlobACommitIsReferencing(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{settings: oneHour})
	data, digest := payload(8, 256<<10)
	s := l.uploadAll(t, l.alice, data, 64<<10)
	l.age(t, "upload_blob")

	gate := l.Faults.Pause(faults.BeforeCommit, s.ID)
	committed := l.Go(commitReq(l.alice, s.ID, "race.bin"))
	<-gate.Reached()
	require.Equal(t, upload.GCReport{}, l.gc(t), "GC skips the row a commit holds")
	require.FileExists(t, l.store.BlobPath(digest))
	gate.Release()
	r := committed.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)

	l.age(t, "upload_blob")
	require.Equal(t, upload.GCReport{}, l.gc(t), "a referenced blob is never reclaimed")
	l.publish(t, f)
	require.Equal(t, data, l.read(t, l.alice, f.ID, nil).Body)
	e2etest.Assert(t, l.Pool, "upload")
}

// UP-F2, the other side: GC has decided — the blob is marked 'deleting'
// (committed) and GC is paused before the unlink — when the commit
// arrives. The commit's conditional UPDATE finds no 'present' row and is
// refused with 410 upload_expired; nothing references the reclaimed bytes.
func TestCommitAfterGCDecidedIsRefused(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{settings: oneHour})
	data, digest := payload(9, 256<<10)
	s := l.uploadAll(t, l.alice, data, 64<<10)
	l.age(t, "upload_blob")

	gate := l.Faults.Pause(faults.BeforeUnlink, digest)
	collected := l.Go(l.gcReq())
	<-gate.Reached()
	require.FileExists(t, l.store.BlobPath(digest), "decided, not yet unlinked")
	r := l.commit(t, l.alice, s.ID, "late.bin")
	require.Equal(t, http.StatusGone, r.Status, string(r.Body))
	require.Equal(t, "upload_expired", r.Code())
	gate.Release()
	require.Equal(t, upload.GCReport{BlobsReclaimed: 1}, gcReportOf(t, collected.Wait(t)))
	l.nothingReferenced(t, digest)
	require.Equal(t, upload.SessionCompleted, l.sessionState(t, s.ID), "the refused commit changed nothing")
	e2etest.Assert(t, l.Pool, "upload")
}

// A completion of the same bytes arrives while GC is unlinking the old
// copy: it waits for GC's row lock, then announces a fresh row and renames
// its own file into place. The blob exists after both, and commits.
func TestCompletionOfTheSameBytesWaitsForGCThenRewritesThem(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{settings: oneHour})
	data, digest := payload(10, 200<<10)
	first := l.uploadAll(t, l.alice, data, 50<<10)
	require.Equal(t, http.StatusOK, l.Do(t, e2etest.Req{Method: "DELETE", Path: "/upload/sessions/" + first.ID, Token: l.alice}).Status)
	l.age(t, "upload_blob")

	second := l.open(t, l.bob, data, 50<<10, digest)
	for n, c := range chunks(data, 50<<10) {
		require.Equal(t, http.StatusCreated, l.put(t, l.bob, second.ID, n, c, nil).Status)
	}
	gate := l.Faults.Pause(faults.BeforeUnlink, digest)
	collected := l.Go(l.gcReq())
	<-gate.Reached()
	completed := l.Go(completeReq(l.bob, second.ID))
	e2etest.WaitForLockWaiters(t, l.Pool, "INSERT INTO upload_blob", 1)
	gate.Release()
	require.Equal(t, 1, gcReportOf(t, collected.Wait(t)).BlobsReclaimed)
	r := completed.Wait(t)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))

	onDisk, err := os.ReadFile(l.store.BlobPath(digest))
	require.NoError(t, err, "the second completion's bytes are in place")
	require.Equal(t, digest, sha(onDisk))
	r = l.commit(t, l.bob, second.ID, "again.bin")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e2etest.Assert(t, l.Pool, "upload")
}

// Abandoned and aborted sessions, and files nobody announced, are
// reclaimed after the grace period; young ones are left alone.
func TestAbandonedSessionsAndStrayFilesAreReclaimed(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{settings: oneHour})
	ctx := context.Background()

	data, digest := payload(11, 100<<10)
	idle := l.open(t, l.alice, data, 50<<10, digest)
	require.Equal(t, http.StatusCreated, l.put(t, l.alice, idle.ID, 0, data[:50<<10], nil).Status)
	require.True(t, l.partialExists(idle.ID))

	aborted := l.uploadAll(t, l.alice, []byte("aborted after completion"), 8)
	r := l.Do(t, e2etest.Req{Method: "DELETE", Path: "/upload/sessions/" + aborted.ID, Token: l.alice})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = l.put(t, l.alice, aborted.ID, 0, []byte("aborted "), nil)
	require.Equal(t, http.StatusGone, r.Status)
	require.Equal(t, "session_gone", r.Code())

	strayPartial := uuid.NewString()
	require.NoError(t, os.WriteFile(l.store.PartialPath(strayPartial), []byte("left by a crash"), 0o640))
	oldStray, oldDigest := payload(12, 1000)
	youngStray, youngDigest := payload(13, 1000)
	require.NoError(t, os.WriteFile(l.store.BlobPath(oldDigest), oldStray, 0o640))
	require.NoError(t, os.WriteFile(l.store.BlobPath(youngDigest), youngStray, 0o640))
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(l.store.BlobPath(oldDigest), old, old))

	rep := l.gc(t)
	require.Equal(t, upload.GCReport{StrayPartials: 1, StrayBlobs: 1, BlobsReclaimed: 1}, rep,
		"inside the grace period only files nobody announced, older than it, go")
	require.NoFileExists(t, l.store.PartialPath(strayPartial))
	require.NoFileExists(t, l.store.BlobPath(oldDigest))
	require.FileExists(t, l.store.BlobPath(youngDigest))
	require.True(t, l.partialExists(idle.ID))

	l.age(t, "upload_blob", "upload_session")
	rep = l.gc(t)
	require.Equal(t, upload.GCReport{SessionsExpired: 1, BlobsReclaimed: 1}, rep)
	require.Equal(t, upload.SessionExpired, l.sessionState(t, idle.ID))
	require.False(t, l.partialExists(idle.ID))
	require.Equal(t, upload.SessionAborted, l.sessionState(t, aborted.ID))
	require.NoFileExists(t, l.store.BlobPath(sha([]byte("aborted after completion"))))
	r = l.put(t, l.alice, idle.ID, 1, data[50<<10:], nil)
	require.Equal(t, http.StatusGone, r.Status)

	_, err := l.store.StatBlob(ctx, youngDigest)
	require.NoError(t, err)
	e2etest.Assert(t, l.Pool, "upload")
}

// A process that died after renaming the blob and before marking the
// session (UP-02's moment, simulated in-process) leaves the session open;
// the client's retried completion finds the bytes at their address and
// completes from them.
func TestCompleteRetriedAfterACrashFinishesFromTheBlob(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{})
	data, digest := payload(14, 300<<10)
	s := l.open(t, l.alice, data, 100<<10, digest)
	for n, c := range chunks(data, 100<<10) {
		require.Equal(t, http.StatusCreated, l.put(t, l.alice, s.ID, n, c, nil).Status)
	}
	l.Faults.Fail(faults.AfterBytesWritten, s.ID)
	r := l.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions/" + s.ID + "/complete", Token: l.alice, Fault: true})
	require.Equal(t, http.StatusInternalServerError, r.Status)
	require.Equal(t, upload.SessionOpen, l.sessionState(t, s.ID))
	require.FileExists(t, l.store.BlobPath(digest))
	require.False(t, l.partialExists(s.ID))
	e2etest.Assert(t, l.Pool, "upload")

	l.Faults.Disarm(faults.AfterBytesWritten)
	r = l.complete(t, l.alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = l.commit(t, l.alice, s.ID, "recovered.bin")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)
	l.publish(t, f)
	require.Equal(t, data, l.read(t, l.alice, f.ID, nil).Body)
	e2etest.Assert(t, l.Pool, "upload")
}

// The invariants are not vacuous: each one reports the damage it exists
// to catch, and holds again once the damage is repaired.
func TestUploadInvariantsSeeTheDamageTheyGuardAgainst(t *testing.T) {
	t.Parallel()
	l := newLab(t, opts{})
	ctx := context.Background()
	data, digest := payload(15, 100<<10)
	f := l.committed(t, l.alice, data, 25<<10, "guarded.bin")
	l.publish(t, f)
	e2etest.Assert(t, l.Pool, "upload")
	path := l.store.BlobPath(digest)

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
		func() { l.exec(t, `UPDATE upload_blob SET refs = 2`) }, func() { l.exec(t, `UPDATE upload_blob SET refs = 1`) })
	damage("UP-F3", "not by the run that completed its job",
		func() { l.exec(t, `UPDATE job SET fence = fence + 1 WHERE id = $1`, f.JobID) },
		func() { l.exec(t, `UPDATE job SET fence = fence - 1 WHERE id = $1`, f.JobID) })
	damage("UP-F4", "not complete and present",
		func() { l.exec(t, `UPDATE upload_blob SET size = size + 1`) }, func() { l.exec(t, `UPDATE upload_blob SET size = size - 1`) })
	damage("UP-F5", "chunk outside the declared layout",
		func() { l.exec(t, `UPDATE upload_chunk SET size = size + 1 WHERE n = 0`) },
		func() { l.exec(t, `UPDATE upload_chunk SET size = size - 1 WHERE n = 0`) })
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
	t.Parallel()
	first := newLab(t, opts{})
	f := first.committed(t, first.alice, []byte("first database's file"), 8, "mine.txt")
	second := newLab(t, opts{dir: first.dir, settings: map[string]string{upload.EnvGrace: "1s"}})
	s := second.open(t, second.alice, []byte("x"), 1, sha([]byte("x")))
	require.Equal(t, http.StatusCreated, second.put(t, second.alice, s.ID, 0, []byte("x"), nil).Status)
	r := second.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions/" + s.ID + "/complete", Token: second.alice, Fault: true})
	require.Equal(t, http.StatusInternalServerError, r.Status)
	r = second.Do(t, e2etest.Req{Method: "POST", Path: "/upload/gc", Token: second.admin, Fault: true})
	require.Equal(t, http.StatusInternalServerError, r.Status)
	require.FileExists(t, first.store.BlobPath(f.SHA256))
	e2etest.Assert(t, first.Pool, "upload")
	e2etest.Assert(t, second.Pool, "upload")
}
