package upload_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

// server is one `fencelab serve` OS process.
type server struct {
	cmd    *exec.Cmd
	url    string
	lines  chan string
	exited chan error
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs `fencelab serve` on dbURL with its blob store at dir and
// waits until it answers /readyz.
func startServe(t *testing.T, dbURL, dir string, args ...string) *server {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", pgtest.FreePort(t))
	cmd := exec.Command(e2etest.Binary(t), append([]string{"serve"}, args...)...)
	cmd.Env = e2etest.ChildEnv(dbURL, "FENCELAB_ADDR="+addr, "FENCELAB_WORKERS=0", "FENCELAB_ACCESS_LOG=false",
		upload.EnvDir+"="+dir)
	stdin, err := cmd.StdinPipe() // held open: a pause waits for a line on it
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s := &server{cmd: cmd, url: "http://" + addr, lines: make(chan string, 16), exited: make(chan error, 1), stderr: &syncBuffer{}}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		s.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		if t.Failed() {
			t.Logf("serve stderr:\n%s", s.stderr.String())
		}
	})
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
		require.True(t, time.Now().Before(deadline), "serve did not become ready; stderr:\n%s", s.stderr.String())
		select {
		case err := <-s.exited:
			t.Fatalf("serve exited: %v; stderr:\n%s", err, s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *server) do(t *testing.T, method, path, tok string, body []byte) (int, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	require.NoError(t, err)
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

	data, digest := payload(2, 2<<20+777)
	const chunkSize = 512 << 10
	parts := chunks(data, chunkSize)
	status, body, err := srv.do(t, "POST", "/upload/sessions", tok, fmt.Appendf(nil,
		`{"total_size":%d,"chunk_count":%d,"chunk_size":%d,"sha256":%q}`, len(data), len(parts), chunkSize, digest))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(body))
	sessionID := between(string(body), `"id":"`, `"`)
	for n, c := range parts {
		status, body, err := srv.do(t, "PUT", fmt.Sprintf("/upload/sessions/%s/chunks/%d", sessionID, n), tok, c)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status, string(body))
	}
	completeErr := make(chan error, 1)
	go func() {
		_, _, err := srv.do(t, "POST", "/upload/sessions/"+sessionID+"/complete", tok, nil)
		completeErr <- err
	}()
	select {
	case line := <-srv.lines:
		require.Equal(t, "PAUSED "+faults.AfterBytesWritten+" "+sessionID, line)
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not reach %s; stderr:\n%s", faults.AfterBytesWritten, srv.stderr.String())
	}
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGKILL))
	exit := <-srv.exited
	require.Error(t, exit)
	require.Contains(t, exit.Error(), "killed")
	require.Error(t, <-completeErr, "the client never got an answer")

	// The same database and blob directory, served by a fresh process.
	l := newLab(t, opts{dbURL: dbURL, dir: dir, settings: map[string]string{upload.EnvGrace: "1h"}})
	onDisk, err := os.ReadFile(l.store.BlobPath(digest))
	require.NoError(t, err, "the bytes were written before the kill")
	require.Equal(t, digest, sha(onDisk))
	require.Equal(t, upload.SessionOpen, l.sessionState(t, sessionID), "no metadata committed")
	require.Equal(t, 0, l.count(t, `SELECT refs FROM upload_blob WHERE sha256 = $1 AND state = 'present'`, digest))
	require.Zero(t, l.count(t, `SELECT count(*) FROM file_object`))
	e2etest.Assert(t, l.Pool, "upload")

	// A committed file, as old as the orphan will be: GC must keep it.
	kept, keptDigest := payload(22, 300<<10)
	keptFile := l.committed(t, l.alice, kept, 100<<10, "kept.bin")
	l.publish(t, keptFile)

	require.Equal(t, upload.GCReport{}, l.gc(t), "inside the grace period nothing is reclaimed")
	require.FileExists(t, l.store.BlobPath(digest))

	l.exec(t, `UPDATE upload_blob SET touched_at = now() - interval '1 hour 1 second'`)
	l.exec(t, `UPDATE upload_session SET touched_at = now() - interval '1 hour 1 second'`)
	rep := l.gc(t)
	require.Equal(t, upload.GCReport{SessionsExpired: 1, BlobsReclaimed: 1}, rep)
	require.NoFileExists(t, l.store.BlobPath(digest), "the orphan is reclaimed")
	require.Zero(t, l.count(t, `SELECT count(*) FROM upload_blob WHERE sha256 = $1`, digest))
	require.Equal(t, upload.SessionExpired, l.sessionState(t, sessionID))
	require.FileExists(t, l.store.BlobPath(keptDigest), "a referenced blob is never reclaimed")
	r := l.read(t, l.alice, keptFile.ID, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, kept, r.Body)

	// The client comes back for its completion: the session is gone.
	r = l.complete(t, l.alice, sessionID)
	require.Equal(t, http.StatusGone, r.Status, string(r.Body))
	require.Equal(t, upload.GCReport{}, l.gc(t), "a second run finds nothing")
	t.Logf("UP-02: serve pid %d killed at %s; orphan %s… reclaimed after the grace period, %d blob(s) kept",
		srv.cmd.Process.Pid, faults.AfterBytesWritten, digest[:12], len(l.blobFiles(t)))
	e2etest.Assert(t, l.Pool, "upload")
}

func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}
