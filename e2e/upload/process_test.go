package upload_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	uploadlab "github.com/fencelab/fencelab/lab/upload"
	"github.com/fencelab/fencelab/services/upload"
)

// server is one `fencelab serve` OS process.
type server struct {
	*e2etest.Child
	url string
}

// startServe runs `fencelab serve` on dbURL with its blob store at dir and
// waits until it answers /readyz.
func startServe(t *testing.T, dbURL, dir string, args ...string) *server {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", pgtest.FreePort(t))
	env := e2etest.ChildEnv(dbURL, "FENCELAB_ADDR="+addr, "FENCELAB_WORKERS=0", "FENCELAB_ACCESS_LOG=false",
		upload.EnvDir+"="+dir)
	s := &server{Child: e2etest.StartChild(t, "serve", env, append([]string{"serve"}, args...)...), url: "http://" + addr}
	// Readiness, not a timing boundary: poll until the process answers.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		require.True(t, time.Now().Before(deadline), "serve did not become ready; stderr:\n%s", s.Stderr())
		select {
		case <-s.Done():
			t.Fatalf("serve exited: %v; stderr:\n%s", s.Err(), s.Stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// do sends one request; it reports every error to the caller (it runs on
// goroutines too, where require cannot stop the test).
func (s *server) do(method, path, tok string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// UP-02: a real `fencelab serve` process is killed with SIGKILL at the
// fault point after the completed file was renamed to blobs/sha256/<hex>
// and before any metadata about it committed. The bytes are an orphan: a
// blob row with no reference and a session still open. GC inside the grace
// period leaves them alone; once the grace period has passed (forced with
// SQL) it reclaims the orphan and the abandoned session — and leaves a
// committed file of the same age untouched. UP-F1 and UP-F2 hold
// throughout.
func TestUP02ServerKilledAfterBlobWrittenLeavesAnOrphanGCReclaimsIt(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	dir := t.TempDir()
	srv := startServe(t, dbURL, dir, "--pause-at", faults.AfterBytesWritten)
	auth, err := httpx.NewAuth([]byte(e2etest.Secret))
	require.NoError(t, err)
	tok, err := auth.Mint("user-0042", httpx.RoleUser, time.Hour)
	require.NoError(t, err)

	data, digest := uploadlab.Payload(2, 2<<20+777)
	const chunkSize = 512 << 10
	parts := uploadlab.Chunks(data, chunkSize)
	status, body, err := srv.do("POST", "/upload/sessions", tok, fmt.Appendf(nil,
		`{"total_size":%d,"chunk_count":%d,"chunk_size":%d,"sha256":%q}`, len(data), len(parts), chunkSize, digest))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(body))
	sessionID := between(string(body), `"id":"`, `"`)
	for n, c := range parts {
		status, body, err := srv.do("PUT", fmt.Sprintf("/upload/sessions/%s/chunks/%d", sessionID, n), tok, c)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status, string(body))
	}
	completeErr := make(chan error, 1)
	go func() {
		_, _, err := srv.do("POST", "/upload/sessions/"+sessionID+"/complete", tok, nil)
		completeErr <- err
	}()
	require.Equal(t, "PAUSED "+faults.AfterBytesWritten+" "+sessionID, srv.Line(t, e2etest.DefaultWait))
	require.NoError(t, srv.Cmd.Process.Signal(syscall.SIGKILL))
	exit := srv.Wait(t, e2etest.DefaultWait)
	require.Error(t, exit)
	require.Contains(t, exit.Error(), "killed")
	require.Error(t, e2etest.WaitOrTimeout(t, completeErr), "the client never got an answer")

	// The same database and blob directory, served by a fresh process.
	l := uploadlab.StartLab(e2etest.X(t), e2etest.Options{DBURL: dbURL, Settings: map[string]string{upload.EnvDir: dir, upload.EnvGrace: "1h"}})
	onDisk, err := os.ReadFile(l.Store.BlobPath(digest))
	require.NoError(t, err, "the bytes were written before the kill")
	require.Equal(t, digest, uploadlab.SHA256Hex(onDisk))
	require.Equal(t, upload.SessionOpen, l.SessionState(t, sessionID), "no metadata committed")
	require.Equal(t, 0, l.Count(t, `SELECT refs FROM upload_blob WHERE sha256 = $1 AND state = 'present'`, digest))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM file_object`))
	e2etest.Assert(t, l.Pool, "upload")

	// A committed file, as old as the orphan will be: GC must keep it.
	kept, keptDigest := uploadlab.Payload(22, 300<<10)
	keptFile := l.Committed(t, l.Alice, kept, 100<<10, "kept.bin")
	l.Publish(t, keptFile)

	require.Equal(t, upload.GCReport{}, l.Gc(t), "inside the grace period nothing is reclaimed")
	require.FileExists(t, l.Store.BlobPath(digest))

	l.Exec(t, `UPDATE upload_blob SET touched_at = now() - interval '1 hour 1 second'`)
	l.Exec(t, `UPDATE upload_session SET touched_at = now() - interval '1 hour 1 second'`)
	rep := l.Gc(t)
	require.Equal(t, upload.GCReport{SessionsExpired: 1, BlobsReclaimed: 1}, rep)
	require.NoFileExists(t, l.Store.BlobPath(digest), "the orphan is reclaimed")
	require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_blob WHERE sha256 = $1`, digest))
	require.Equal(t, upload.SessionExpired, l.SessionState(t, sessionID))
	require.FileExists(t, l.Store.BlobPath(keptDigest), "a referenced blob is never reclaimed")
	r := l.Read(t, l.Alice, keptFile.ID, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, kept, r.Body)

	// The client comes back for its completion: the session is gone.
	r = l.Complete(t, l.Alice, sessionID)
	require.Equal(t, http.StatusGone, r.Status, string(r.Body))
	require.Equal(t, upload.GCReport{}, l.Gc(t), "a second run finds nothing")
	t.Logf("UP-02: serve pid %d killed at %s; orphan %s… reclaimed after the grace period, %d blob(s) kept",
		srv.Pid(), faults.AfterBytesWritten, digest[:12], len(l.BlobFiles(t)))
	e2etest.Assert(t, l.Pool, "upload")
}

func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}
