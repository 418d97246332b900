package upload_test

import (
	"context"
	"crypto/sha256"
	"encoding"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	uploadlab "github.com/fencelab/fencelab/lab/upload"
	"github.com/fencelab/fencelab/services/upload"
)

// runningHash reads a session's saved running hash: how many leading
// chunks it covers and its marshalled state.
func runningHash(t *testing.T, l *uploadlab.Lab, id string) (int, []byte) {
	t.Helper()
	var n int
	var state []byte
	require.NoError(t, l.Pool.QueryRow(context.Background(),
		`SELECT hashed_chunks, state FROM upload_hash WHERE session_id = $1`, id).Scan(&n, &state))
	return n, state
}

// prefixState is what the running hash must hold after the first k
// chunks: crypto/sha256's marshalled state having been fed exactly them.
func prefixState(t *testing.T, chunks [][]byte, k int) []byte {
	t.Helper()
	h := sha256.New()
	for _, c := range chunks[:k] {
		h.Write(c)
	}
	b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	require.NoError(t, err)
	return b
}

// requireHashedThrough checks the saved running hash covers exactly the
// first k chunks, with their bytes.
func requireHashedThrough(t *testing.T, l *uploadlab.Lab, id string, chunks [][]byte, k int) {
	t.Helper()
	n, state := runningHash(t, l, id)
	require.Equal(t, k, n, "chunks covered by the running hash")
	require.Equal(t, prefixState(t, chunks, k), state, "the running hash is the SHA-256 state of chunks 0..%d", k-1)
}

// hashedBytes reads fencelab_upload_hashed_bytes_total{how} of one app.
func hashedBytes(t *testing.T, l *uploadlab.Lab, how string) int {
	t.Helper()
	families, err := l.Metrics.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "fencelab_upload_hashed_bytes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "how" && lp.GetValue() == how {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// UP-F5 with a running hash. Chunks that arrive in order are hashed as
// they are written (never read back); chunks ahead of a gap are read back
// once the gap is filled; a process that dies between recording a chunk
// and advancing the hash loses nothing but that advance; and a fresh
// process (a restart, another replica) continues from the state saved in
// PostgreSQL. After every step the saved state is exactly the SHA-256
// state of the leading chunks; the completed blob is the declared file.
func TestRunningHashContinuesAcrossARestartAndOutOfOrderChunks(t *testing.T) {
	first := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	const chunkSize = 64 << 10
	data, digest := uploadlab.Payload(31, 6*chunkSize+1234)
	chunks := uploadlab.Chunks(data, chunkSize)
	require.Len(t, chunks, 7)
	s := first.Open(t, first.Alice, data, chunkSize, digest)
	requireHashedThrough(t, first, s.ID, chunks, 0)

	put := func(l *uploadlab.Lab, n int) {
		t.Helper()
		r := l.Put(t, l.Alice, s.ID, n, chunks[n], nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	put(first, 0) // in order: hashed as written
	requireHashedThrough(t, first, s.ID, chunks, 1)
	put(first, 3) // ahead of a gap: stored, not hashed
	put(first, 2)
	requireHashedThrough(t, first, s.ID, chunks, 1)
	require.Equal(t, len(chunks[0]), hashedBytes(t, first, "streamed"))
	require.Zero(t, hashedBytes(t, first, "reread"))

	// The process "dies" after recording chunk 1 and before advancing the
	// hash with it: the chunk is stored, the saved hash has not moved.
	first.Faults.Fail(upload.PointChunkRecorded, fmt.Sprintf("%s/1", s.ID))
	r := first.Do(t, faulted(uploadlab.PutReq(first.Alice, s.ID, 1, chunks[1], nil)))
	require.Equal(t, http.StatusInternalServerError, r.Status, string(r.Body))
	first.Faults.Disarm(upload.PointChunkRecorded)
	require.Equal(t, 1, first.Count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1 AND n = 1`, s.ID))
	requireHashedThrough(t, first, s.ID, chunks, 1)
	e2etest.Assert(t, first.Pool, "upload")

	// A fresh process on the same database and store continues from the
	// saved state: chunk 4 closes nothing by itself, but its PUT folds in
	// the stored run 1..4, reading those chunks back.
	second := uploadlab.StartLab(e2etest.X(t), e2etest.Options{DBURL: first.DBURL, Settings: map[string]string{upload.EnvDir: first.Dir}})
	put(second, 4)
	requireHashedThrough(t, second, s.ID, chunks, 5)
	require.Equal(t, 4*chunkSize, hashedBytes(t, second, "reread"))
	put(second, 6) // ahead of the gap at 5
	requireHashedThrough(t, second, s.ID, chunks, 5)
	put(second, 5) // in order: hashed as written, then 6 read back
	requireHashedThrough(t, second, s.ID, chunks, 7)
	require.Equal(t, chunkSize, hashedBytes(t, second, "streamed"))
	require.Equal(t, 4*chunkSize+len(chunks[6]), hashedBytes(t, second, "reread"))

	// Complete only finishes the hash: nothing is left to read.
	r = second.Complete(t, second.Alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, 4*chunkSize+len(chunks[6]), hashedBytes(t, second, "reread"))
	var done upload.Session
	r.JSON(t, &done)
	require.Equal(t, upload.SessionCompleted, done.State)
	r = second.Commit(t, second.Alice, s.ID, "restarted.bin")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var file upload.File
	r.JSON(t, &file)
	require.Equal(t, digest, file.SHA256)
	second.Publish(t, file)
	require.Equal(t, data, second.Read(t, second.Alice, file.ID, nil).Body)
	require.FileExists(t, second.Store.BlobPath(digest))
	e2etest.Assert(t, second.Pool, "upload")
}

// UP-F5, the running hash's fence. A writer hashed chunk 1 as it wrote it
// and is paused after recording it; meanwhile another PUT folds chunk 1
// (read back) and chunk 2 into the saved hash. The paused writer's state
// is now stale: released, it must drop it rather than save it over the
// newer one — the saved hash still covers exactly chunks 0..2 — and the
// file completes as declared.
func TestAStaleStreamedHashIsDroppedNotSaved(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	const chunkSize = 32 << 10
	data, digest := uploadlab.Payload(32, 4*chunkSize)
	chunks := uploadlab.Chunks(data, chunkSize)
	s := l.Open(t, l.Alice, data, chunkSize, digest)
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 0, chunks[0], nil).Status)
	requireHashedThrough(t, l, s.ID, chunks, 1)

	gate := l.Faults.Pause(upload.PointChunkRecorded, fmt.Sprintf("%s/1", s.ID))
	late := l.Go(uploadlab.PutReq(l.Alice, s.ID, 1, chunks[1], nil))
	e2etest.WaitOrTimeout(t, gate.Reached(), "chunk 1's writer recorded its chunk")
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 2, chunks[2], nil).Status)
	requireHashedThrough(t, l, s.ID, chunks, 3)
	require.Equal(t, 2*chunkSize, hashedBytes(t, l, "reread"), "chunks 1 and 2 read back")

	gate.Release()
	r := late.Wait(t)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	requireHashedThrough(t, l, s.ID, chunks, 3)
	require.Equal(t, chunkSize, hashedBytes(t, l, "streamed"), "only chunk 0's streamed state was taken")

	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 3, chunks[3], nil).Status)
	requireHashedThrough(t, l, s.ID, chunks, 4)
	r = l.Complete(t, l.Alice, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.FileExists(t, l.Store.BlobPath(digest))
	e2etest.Assert(t, l.Pool, "upload")
}
