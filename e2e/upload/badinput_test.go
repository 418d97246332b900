package upload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	uploadlab "github.com/fencelab/fencelab/lab/upload"
	"github.com/fencelab/fencelab/services/upload"
)

// Every client mistake is a 4xx problem with a stable code, and none of
// them leaves a reference to any byte: no blob row, no blob file, no
// file_object.
func TestBadInputIs4xxAndReferencesNothing(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{Settings: map[string]string{
		upload.EnvMaxFileSize: "8MiB", upload.EnvMaxChunkSize: "1MiB", upload.EnvMaxChunks: "100",
	}})
	const chunkSize = 200 << 10
	data, digest := uploadlab.Payload(6, 3*chunkSize)
	parts := uploadlab.Chunks(data, chunkSize)
	s := l.Open(t, l.Alice, data, chunkSize, digest)
	l.App = l.App.BadInput() // from here on, bad input on purpose: only the responses are checked against the contract
	chunkPath := func(n string) string { return "/upload/sessions/" + s.ID + "/chunks/" + n }
	expect := func(t *testing.T, r e2etest.Response, status int, code string) {
		t.Helper()
		require.Equal(t, status, r.Status, string(r.Body))
		require.Equal(t, code, r.Code(), string(r.Body))
	}

	t.Run("declarations", func(t *testing.T) {
		for _, c := range []struct {
			req    upload.CreateSessionRequest
			status int
			code   string
		}{
			{upload.CreateSessionRequest{TotalSize: 9 << 20, ChunkCount: 9, SHA256: digest}, 413, "file_too_large"},
			{upload.CreateSessionRequest{TotalSize: 4 << 20, ChunkCount: 101, ChunkSize: 41528, SHA256: digest}, 422, "too_many_chunks"},
			{upload.CreateSessionRequest{TotalSize: 4 << 20, ChunkCount: 2, SHA256: digest}, 422, "chunk_size_too_large"},
			{upload.CreateSessionRequest{TotalSize: 1000, ChunkCount: 3, ChunkSize: 500, SHA256: digest}, 422, "invalid_declaration"},
			{upload.CreateSessionRequest{TotalSize: 5, ChunkCount: 10, SHA256: digest}, 422, "invalid_declaration"},
			{upload.CreateSessionRequest{TotalSize: -1, ChunkCount: 1, SHA256: digest}, 422, "invalid_declaration"},
			{upload.CreateSessionRequest{TotalSize: 10, ChunkCount: 0, SHA256: digest}, 422, "invalid_declaration"},
			{upload.CreateSessionRequest{TotalSize: 0, ChunkCount: 2, SHA256: digest}, 422, "invalid_declaration"},
			{upload.CreateSessionRequest{TotalSize: 10, ChunkCount: 1, SHA256: "not-hex"}, 422, "invalid_declaration"},
			{upload.CreateSessionRequest{TotalSize: 10, ChunkCount: 1, SHA256: digest[:63]}, 422, "invalid_declaration"},
		} {
			expect(t, l.Create(t, l.Alice, c.req), c.status, c.code)
		}
		r := l.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions", Token: l.Alice,
			Body: `{"total_size":10,"chunk_count":1,"sha256":"` + digest + `","owner":"user-0043"}`})
		expect(t, r, 400, "unknown_field")
		r = l.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions", Body: upload.CreateSessionRequest{TotalSize: 1, ChunkCount: 1, SHA256: digest}})
		expect(t, r, 401, "unauthorized")
	})

	t.Run("chunk index out of range", func(t *testing.T) {
		expect(t, l.Put(t, l.Alice, s.ID, 3, parts[0], nil), 422, "chunk_out_of_range")
		expect(t, l.Put(t, l.Alice, s.ID, -1, parts[0], nil), 422, "chunk_out_of_range")
		for _, n := range []string{"x", "1.5", "99999999999999999999"} {
			r := l.Do(t, e2etest.Req{Method: "PUT", Path: chunkPath(n), Token: l.Alice, Body: parts[0]})
			expect(t, r, 400, "invalid_chunk_index")
		}
	})

	t.Run("oversized or short chunk", func(t *testing.T) {
		expect(t, l.Put(t, l.Alice, s.ID, 0, append(bytes.Clone(parts[0]), 'x'), nil), 413, "chunk_too_large")
		expect(t, l.Put(t, l.Alice, s.ID, 0, parts[0][:chunkSize-1], nil), 422, "chunk_size_mismatch")
		// Without a Content-Length (chunked transfer coding) the limit is
		// enforced while streaming.
		for _, c := range []struct {
			body   io.Reader
			status int
			code   string
		}{
			{io.MultiReader(bytes.NewReader(parts[0]), bytes.NewReader([]byte("extra"))), 413, "chunk_too_large"},
			{io.MultiReader(bytes.NewReader(parts[0][:1000])), 422, "chunk_size_mismatch"},
		} {
			req, err := http.NewRequest("PUT", l.URL+chunkPath("0"), c.body)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+l.Alice)
			resp, err := l.Client.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			expect(t, e2etest.Response{Status: resp.StatusCode, Body: b}, c.status, c.code)
		}
		require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_chunk`), "no rejected chunk is recorded")
	})

	t.Run("checksum headers", func(t *testing.T) {
		expect(t, l.Put(t, l.Alice, s.ID, 1, parts[1], map[string]string{"Content-SHA256": uploadlab.SHA256Hex(parts[0])}), 422, "chunk_checksum_mismatch")
		expect(t, l.Put(t, l.Alice, s.ID, 1, parts[1], map[string]string{"Content-SHA256": "abc"}), 400, "invalid_checksum_header")
		expect(t, l.Put(t, l.Alice, s.ID, 1, parts[1], map[string]string{"Content-Digest": "sha-256=abc"}), 400, "invalid_checksum_header")
		sum := sha256.Sum256(parts[1])
		digestHeader := fmt.Sprintf("sha-512=:AAAA:, sha-256=:%s:", base64.StdEncoding.EncodeToString(sum[:]))
		r := l.Put(t, l.Alice, s.ID, 1, parts[1], map[string]string{"Content-Digest": digestHeader})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Equal(t, 1, l.Count(t, `SELECT count(*) FROM upload_chunk WHERE session_id = $1 AND n = 1 AND sha256 = $2`, s.ID, uploadlab.SHA256Hex(parts[1])),
			"the verified checksum is recorded")
		expect(t, l.Put(t, l.Alice, s.ID, 1, parts[1], map[string]string{"Content-SHA256": uploadlab.SHA256Hex(parts[2])}), 422, "chunk_checksum_mismatch")
	})

	t.Run("session of another user", func(t *testing.T) {
		expect(t, l.Put(t, l.Bob, s.ID, 0, parts[0], nil), 403, "forbidden")
		expect(t, l.Complete(t, l.Bob, s.ID), 403, "forbidden")
		expect(t, l.Commit(t, l.Bob, s.ID, "mine.bin"), 403, "forbidden")
		expect(t, l.Do(t, e2etest.Req{Method: "GET", Path: "/upload/sessions/" + s.ID, Token: l.Bob}), 403, "forbidden")
		expect(t, l.Do(t, e2etest.Req{Method: "DELETE", Path: "/upload/sessions/" + s.ID, Token: l.Bob}), 403, "forbidden")
		expect(t, l.Put(t, l.Alice, "00000000-0000-4000-8000-000000000000", 0, parts[0], nil), 404, "session_not_found")
		expect(t, l.Put(t, l.Alice, "..%2F..%2Fetc", 0, parts[0], nil), 400, "invalid_id")
		require.Equal(t, upload.SessionOpen, l.SessionState(t, s.ID))
	})

	t.Run("completing with missing chunks", func(t *testing.T) {
		require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 2, parts[2], nil).Status)
		r := l.Complete(t, l.Alice, s.ID)
		expect(t, r, 409, "missing_chunks")
		var p struct {
			Missing []int `json:"missing_chunks"`
			Count   int   `json:"missing_count"`
		}
		r.JSON(t, &p)
		require.Equal(t, []int{0}, p.Missing)
		require.Equal(t, 1, p.Count)
		var got upload.Session
		l.Do(t, e2etest.Req{Method: "GET", Path: "/upload/sessions/" + s.ID, Token: l.Alice}).JSON(t, &got)
		require.Equal(t, upload.SessionOpen, got.State)
		require.Equal(t, 2, got.Received)
		require.Equal(t, []int{0}, got.Missing)
		expect(t, l.Commit(t, l.Alice, s.ID, "early.bin"), 409, "not_completed")
	})

	t.Run("commit metadata", func(t *testing.T) {
		other := l.UploadAll(t, l.Alice, []byte("a small file"), 4)
		for _, c := range []struct {
			body string
			code string
		}{
			{`{"name":""}`, "invalid_name"},
			{`{"name":"a/b"}`, "invalid_name"},
			{`{"name":"bell\u0007"}`, "invalid_name"},
			{`{"name":"x","metadata":[1,2]}`, "invalid_metadata"},
			{`{"name":"x","metadata":"text"}`, "invalid_metadata"},
		} {
			r := l.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions/" + other.ID + "/commit", Token: l.Alice, Body: c.body})
			expect(t, r, 422, c.code)
		}
		r := l.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions/" + other.ID + "/commit", Token: l.Alice,
			Body: bytes.Repeat([]byte("x"), 70<<10)})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "the JSON routes under the chunk prefix keep a body limit")
		require.Equal(t, 0, l.Count(t, `SELECT count(*) FROM file_object`))
		require.Equal(t, 0, l.Count(t, `SELECT coalesce(sum(refs), 0) FROM upload_blob`))
	})

	l.NothingReferenced(t, digest)
	e2etest.Assert(t, l.Pool, "upload")
}

// A chunk whose range is being written (here: locked by the test, as a
// writer in another process would hold it) is a 409 chunk_in_progress with
// Retry-After; once the lock is gone the same PUT stores it.
func TestChunkBeingWrittenElsewhereIs409InProgress(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	data, digest := uploadlab.Payload(7, 96<<10)
	parts := uploadlab.Chunks(data, 32<<10)
	s := l.Open(t, l.Alice, data, 32<<10, digest)
	part, err := l.Store.OpenPartial(context.Background(), s.ID, true)
	require.NoError(t, err)
	unlock, err := part.LockRange(32<<10, 32<<10)
	require.NoError(t, err)

	r := l.Put(t, l.Alice, s.ID, 1, parts[1], nil)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "chunk_in_progress", r.Code())
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 0, parts[0], nil).Status, "other chunks are not blocked")

	unlock()
	require.NoError(t, part.Close())
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 1, parts[1], nil).Status)
	require.Equal(t, http.StatusCreated, l.Put(t, l.Alice, s.ID, 2, parts[2], nil).Status)
	require.Equal(t, http.StatusOK, l.Complete(t, l.Alice, s.ID).Status)
	e2etest.Assert(t, l.Pool, "upload")
}

// The empty file is one empty chunk.
func TestEmptyFileUploads(t *testing.T) {
	l := e2etest.StartLab(t, uploadlab.StartLab, e2etest.Options{})
	f := l.Committed(t, l.Alice, []byte{}, 1, "empty.txt")
	l.Publish(t, f)
	r := l.Read(t, l.Alice, f.ID, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Empty(t, r.Body)
	require.Equal(t, `"`+uploadlab.SHA256Hex(nil)+`"`, r.Header.Get("ETag"))
	e2etest.Assert(t, l.Pool, "upload")
}
