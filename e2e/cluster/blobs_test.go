package cluster_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

// chunksOnEveryReplicaMakeOneBlob sends each chunk of one upload to a
// different serve replica, completes and commits it on a fourth request
// through HAProxy, lets a worker process it, and reads it back: the
// replicas and workers share one blob store (the cluster's data
// directory), so the chunks meet in one partial file and become one blob.
func chunksOnEveryReplicaMakeOneBlob(t *testing.T, c *cluster) {
	t.Helper()
	tok := c.token(t, "uploader-1", httpx.RoleUser)
	data := bytes.Repeat([]byte("fencelab failover chapter, shared blob store\n"), 3000) // 135 kB
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	const chunkSize = 48 << 10
	var parts [][]byte
	for off := 0; off < len(data); off += chunkSize {
		parts = append(parts, data[off:min(off+chunkSize, len(data))])
	}
	require.Len(t, parts, 3, "one chunk per replica")

	r := c.app.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions", Token: tok, Body: upload.CreateSessionRequest{
		TotalSize: int64(len(data)), ChunkCount: len(parts), ChunkSize: chunkSize, SHA256: digest}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var s upload.Session
	r.JSON(t, &s)
	for n, part := range parts {
		replica := &lab.App{URL: c.env[fmt.Sprintf("SERVE%d_URL", n)], Client: c.app.Client}
		r := replica.Do(t, e2etest.Req{Method: "PUT", Path: fmt.Sprintf("/upload/sessions/%s/chunks/%d", s.ID, n), Token: tok, Body: part})
		require.Equal(t, http.StatusCreated, r.Status, "chunk %d on serve%d: %s", n, n, r.Body)
	}
	r = c.app.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions/" + s.ID + "/complete", Token: tok})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = c.app.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions/" + s.ID + "/commit", Token: tok,
		Body: upload.CommitRequest{Name: "shared.txt"}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)

	require.Eventually(t, func() bool {
		r := c.app.Do(t, e2etest.Req{Method: "GET", Path: "/upload/files/" + f.ID + "/info", Token: tok})
		var got upload.File
		return r.Status == http.StatusOK && json.Unmarshal(r.Body, &got) == nil && got.State == upload.FilePublished
	}, 30*time.Second, 100*time.Millisecond, "a worker publishes the file from the shared store")
	r = c.app.Do(t, e2etest.Req{Method: "GET", Path: "/upload/files/" + f.ID, Token: tok})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.True(t, bytes.Equal(data, r.Body), "the bytes read back are the bytes sent")

	blobs, err := os.ReadDir(filepath.Join(c.env["APP_DATA_DIR"], "upload", "blobs", "sha256"))
	require.NoError(t, err)
	require.Len(t, blobs, 1, "one blob in the shared store")
	require.Equal(t, digest, blobs[0].Name())
}
