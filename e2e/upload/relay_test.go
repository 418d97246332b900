package upload_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

// The relay (services/upload/hash.go): chunks this process receives
// together are hashed as they are written, each writer starting from the
// state the writer of the chunk before hands on, and a handed-on state is
// taken into the saved hash only when it starts exactly where the saved
// hash (or the read-back chunks before it) ends (UP-F5).

// holdAndFail arms point for key with a gate that holds the hit until
// fail is closed, then fails it as if the process died there.
func holdAndFail(f *faults.Set, point, key string) (reached <-chan struct{}, fail chan struct{}) {
	r, fl := make(chan struct{}), make(chan struct{})
	var taken atomic.Bool
	f.ArmFunc(point, func(ctx context.Context, k string) error {
		if k != key || !taken.CompareAndSwap(false, true) {
			return nil
		}
		close(r)
		select {
		case <-fl:
			return faults.ErrInjected
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return r, fl
}

func key(id string, n int) string { return fmt.Sprintf("%s/%d", id, n) }

// Chunk 1 arrives while chunk 0's writer is at work (held before its
// body): chunk 1's writer waits for the state after chunk 0 instead of
// writing unhashed, and neither chunk is read back.
func TestChunksSentTogetherAreHashedAsWrittenNotReadBack(t *testing.T) {
	t.Parallel()
	l := upload.StartLab(e2etest.X(t), upload.LabOptions{})
	const chunkSize = 64 << 10
	data, digest := upload.Payload(41, 3*chunkSize)
	chunks := upload.Chunks(data, chunkSize)
	s := l.Open(t, l.Alice, data, chunkSize, digest)

	first := l.Faults.Pause(upload.PointChunkBody, key(s.ID, 0))
	put0 := l.Go(upload.PutReq(l.Alice, s.ID, 0, chunks[0], nil))
	e2etest.WaitOrTimeout(t, first.Reached(), "chunk 0's writer holds its range, body unread")
	waiting := l.Faults.Pause(upload.PointChunkAwaits, key(s.ID, 1))
	put1 := l.Go(upload.PutReq(l.Alice, s.ID, 1, chunks[1], nil))
	e2etest.WaitOrTimeout(t, waiting.Reached(), "chunk 1's writer waits for chunk 0's")
	waiting.Release()
	first.Release()
	r := put0.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = put1.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	requireHashedThrough(t, l, s.ID, chunks, 2)
	require.Equal(t, 2*chunkSize, hashedBytes(t, l, "streamed"), "both chunks hashed as they were written")
	require.Zero(t, hashedBytes(t, l, "reread"))

	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 2, chunks[2], nil).Status)
	requireHashedThrough(t, l, s.ID, chunks, 3)
	r = l.Complete(t, l.Alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Zero(t, hashedBytes(t, l, "reread"), "complete had nothing left to read")
	require.FileExists(t, l.Store.BlobPath(digest))
	e2etest.Assert(t, l.Pool, "upload")
}

// Chunk 0's writer hands on the state after bytes that never land (they
// are wrong, and the writer dies before recording them); chunk 1's writer
// hashes from that state. When chunk 0 is sent again with the right bytes,
// chunk 1's streamed state does not start where the saved hash ends: it is
// dropped, chunk 1 is read back, and the file completes as declared.
func TestAHandedOnStateWhoseChunkNeverLandsIsNotUsed(t *testing.T) {
	t.Parallel()
	l := upload.StartLab(e2etest.X(t), upload.LabOptions{})
	const chunkSize = 32 << 10
	data, digest := upload.Payload(42, 3*chunkSize)
	chunks := upload.Chunks(data, chunkSize)
	s := l.Open(t, l.Alice, data, chunkSize, digest)

	written, die := holdAndFail(l.Faults, upload.PointChunkWritten, key(s.ID, 0))
	wrong := l.Go(faulted(upload.PutReq(l.Alice, s.ID, 0, chunks[2], nil)))
	e2etest.WaitOrTimeout(t, written, "chunk 0's wrong bytes written, their state handed on")
	recorded := l.Faults.Pause(upload.PointChunkRecorded, key(s.ID, 1))
	put1 := l.Go(upload.PutReq(l.Alice, s.ID, 1, chunks[1], nil))
	e2etest.WaitOrTimeout(t, recorded.Reached(), "chunk 1 hashed from the handed-on state and recorded")
	close(die)
	r := wrong.Wait(t)
	require.Equal(t, http.StatusInternalServerError, r.Status, string(r.Body))
	recorded.Release()
	r = put1.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	requireHashedThrough(t, l, s.ID, chunks, 0)
	require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1 AND n = 0`, s.ID))

	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 0, chunks[0], nil).Status)
	requireHashedThrough(t, l, s.ID, chunks, 2)
	require.Equal(t, chunkSize, hashedBytes(t, l, "streamed"), "only chunk 0's second writer's state was taken")
	require.Equal(t, chunkSize, hashedBytes(t, l, "reread"), "chunk 1 read back")

	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 2, chunks[2], nil).Status)
	r = l.Complete(t, l.Alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.FileExists(t, l.Store.BlobPath(digest))
	e2etest.Assert(t, l.Pool, "upload")
}

// Chunk 1's writer waits for chunk 0's, which dies before its body: the
// waiter stops waiting, writes without hashing, and its chunk is read back
// once chunk 0 is stored.
func TestAWaiterWritesUnhashedWhenTheWriterBeforeDies(t *testing.T) {
	t.Parallel()
	l := upload.StartLab(e2etest.X(t), upload.LabOptions{})
	const chunkSize = 32 << 10
	data, digest := upload.Payload(43, 2*chunkSize+100)
	chunks := upload.Chunks(data, chunkSize)
	s := l.Open(t, l.Alice, data, chunkSize, digest)

	held, die := holdAndFail(l.Faults, upload.PointChunkBody, key(s.ID, 0))
	put0 := l.Go(faulted(upload.PutReq(l.Alice, s.ID, 0, chunks[0], nil)))
	e2etest.WaitOrTimeout(t, held, "chunk 0's writer holds its range, body unread")
	waiting := l.Faults.Pause(upload.PointChunkAwaits, key(s.ID, 1))
	put1 := l.Go(upload.PutReq(l.Alice, s.ID, 1, chunks[1], nil))
	e2etest.WaitOrTimeout(t, waiting.Reached(), "chunk 1's writer waits for chunk 0's")
	waiting.Release()
	close(die)
	r := put0.Wait(t)
	require.Equal(t, http.StatusInternalServerError, r.Status, string(r.Body))
	r = put1.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	requireHashedThrough(t, l, s.ID, chunks, 0)
	require.Zero(t, hashedBytes(t, l, "streamed"))

	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 0, chunks[0], nil).Status)
	requireHashedThrough(t, l, s.ID, chunks, 2)
	require.Equal(t, chunkSize, hashedBytes(t, l, "streamed"))
	require.Equal(t, chunkSize, hashedBytes(t, l, "reread"), "chunk 1, written unhashed, read back")
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 2, chunks[2], nil).Status)
	r = l.Complete(t, l.Alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.FileExists(t, l.Store.BlobPath(digest))
	e2etest.Assert(t, l.Pool, "upload")
}
