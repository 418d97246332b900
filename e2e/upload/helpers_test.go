package upload_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/upload"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// lab is one experiment's app, its blob store and two users' tokens.
type lab struct {
	*e2etest.App
	dir   string // the store's root
	store *upload.LocalStore
	alice string // user-0042
	bob   string // user-0043
	admin string
}

type opts struct {
	dbURL    string
	dir      string            // blob store root (default: under the app's data dir)
	settings map[string]string // FENCELAB_UPLOAD_*
}

func newLab(t *testing.T, o opts) *lab {
	t.Helper()
	settings := map[string]string{}
	for k, v := range o.settings {
		settings[k] = v
	}
	if o.dir != "" {
		settings[upload.EnvDir] = o.dir
	}
	a := e2etest.Start(t, e2etest.Options{DBURL: o.dbURL, Settings: settings})
	dir := o.dir
	if dir == "" {
		dir = filepath.Join(a.Deps.Config.DataDir, "upload")
	}
	store, err := upload.NewLocalStore(dir)
	require.NoError(t, err)
	return &lab{App: a, dir: dir, store: store,
		alice: a.Token(t, "user-0042", httpx.RoleUser), bob: a.Token(t, "user-0043", httpx.RoleUser),
		admin: a.Token(t, "admin-0001", httpx.RoleAdmin)}
}

// payload is size deterministic pseudo-random bytes and their SHA-256.
func payload(seed uint64, size int) ([]byte, string) {
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
	_, _ = r.Read(b)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// chunks splits data into chunkSize pieces.
func chunks(data []byte, chunkSize int) [][]byte {
	var out [][]byte
	for off := 0; off < len(data); off += chunkSize {
		out = append(out, data[off:min(off+chunkSize, len(data))])
	}
	if len(out) == 0 {
		out = [][]byte{{}}
	}
	return out
}

func (l *lab) create(t *testing.T, tok string, req upload.CreateSessionRequest) e2etest.Response {
	t.Helper()
	return l.Do(t, e2etest.Req{Method: "POST", Path: "/upload/sessions", Token: tok, Body: req})
}

// open creates a session for data in chunks of chunkSize and returns it.
func (l *lab) open(t *testing.T, tok string, data []byte, chunkSize int, declared string) upload.Session {
	t.Helper()
	req := upload.CreateSessionRequest{TotalSize: int64(len(data)), ChunkCount: len(chunks(data, chunkSize)), SHA256: declared}
	if len(data) > 0 {
		req.ChunkSize = int64(chunkSize)
	}
	r := l.create(t, tok, req)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var s upload.Session
	r.JSON(t, &s)
	return s
}

func (l *lab) put(t *testing.T, tok, id string, n int, body []byte, headers map[string]string) e2etest.Response {
	t.Helper()
	return l.Do(t, putReq(tok, id, n, body, headers))
}

func putReq(tok, id string, n int, body []byte, headers map[string]string) e2etest.Req {
	return e2etest.Req{Method: "PUT", Path: fmt.Sprintf("/upload/sessions/%s/chunks/%d", id, n), Token: tok,
		Body: body, Headers: headers}
}

func (l *lab) complete(t *testing.T, tok, id string) e2etest.Response {
	t.Helper()
	return l.Do(t, completeReq(tok, id))
}

func completeReq(tok, id string) e2etest.Req {
	return e2etest.Req{Method: "POST", Path: "/upload/sessions/" + id + "/complete", Token: tok}
}

func (l *lab) commit(t *testing.T, tok, id, name string) e2etest.Response {
	t.Helper()
	return l.Do(t, commitReq(tok, id, name))
}

func commitReq(tok, id, name string) e2etest.Req {
	return e2etest.Req{Method: "POST", Path: "/upload/sessions/" + id + "/commit", Token: tok,
		Body: upload.CommitRequest{Name: name, Metadata: []byte(`{"album":"lab"}`)}}
}

func (l *lab) read(t *testing.T, tok, fileID string, headers map[string]string) e2etest.Response {
	t.Helper()
	return l.Do(t, e2etest.Req{Method: "GET", Path: "/upload/files/" + fileID, Token: tok, Headers: headers})
}

func (l *lab) gc(t *testing.T) upload.GCReport {
	t.Helper()
	return gcReportOf(t, l.Do(t, l.gcReq()))
}

func (l *lab) gcReq() e2etest.Req {
	return e2etest.Req{Method: "POST", Path: "/upload/gc", Token: l.admin}
}

func gcReportOf(t *testing.T, r e2etest.Response) upload.GCReport {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rep upload.GCReport
	r.JSON(t, &rep)
	return rep
}

// uploadAll sends every chunk in order and completes the session.
func (l *lab) uploadAll(t *testing.T, tok string, data []byte, chunkSize int) upload.Session {
	t.Helper()
	s := l.open(t, tok, data, chunkSize, sha(data))
	for n, c := range chunks(data, chunkSize) {
		r := l.put(t, tok, s.ID, n, c, nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	r := l.complete(t, tok, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &s)
	require.Equal(t, upload.SessionCompleted, s.State)
	return s
}

// committed uploads data and commits it as name; it returns the file.
func (l *lab) committed(t *testing.T, tok string, data []byte, chunkSize int, name string) upload.File {
	t.Helper()
	s := l.uploadAll(t, tok, data, chunkSize)
	r := l.commit(t, tok, s.ID, name)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)
	require.Equal(t, upload.FileProcessing, f.State)
	return f
}

// claimProcess claims the file's processing job as owner.
func (l *lab) claimProcess(t *testing.T, owner string, jobID int64) *claim.Job {
	t.Helper()
	jobs, err := l.Deps.Jobs.Claim(context.Background(), claim.ClaimParams{Kinds: []string{upload.KindProcess}, Owner: owner, Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "%s found no processing job to claim", owner)
	require.Equal(t, jobID, jobs[0].ID)
	return jobs[0]
}

// publish runs the file's processing job to completion.
func (l *lab) publish(t *testing.T, f upload.File) {
	t.Helper()
	j := l.claimProcess(t, "runner-"+f.ID[:8], f.JobID)
	require.NoError(t, l.Deps.Jobs.Execute(context.Background(), j))
}

func (l *lab) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, l.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (l *lab) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := l.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (l *lab) sessionState(t *testing.T, id string) upload.SessionState {
	t.Helper()
	var st string
	require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT state FROM upload_session WHERE id = $1`, id).Scan(&st))
	return upload.SessionState(st)
}

// blobFiles lists the files in the blob directory.
func (l *lab) blobFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(l.dir, "blobs", "sha256"))
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func (l *lab) partialExists(id string) bool {
	_, err := os.Stat(l.store.PartialPath(id))
	return err == nil
}

// nothingReferenced asserts that no blob row, blob file or file_object
// exists for sha.
func (l *lab) nothingReferenced(t *testing.T, sha string) {
	t.Helper()
	require.Zero(t, l.count(t, `SELECT count(*) FROM upload_blob WHERE sha256 = $1`, sha), "blob row")
	require.Zero(t, l.count(t, `SELECT count(*) FROM file_object WHERE blob_sha256 = $1`, sha), "file_object")
	_, err := os.Stat(l.store.BlobPath(sha))
	require.ErrorIs(t, err, os.ErrNotExist, "blob file")
}

func itoa(n int) string { return strconv.Itoa(n) }
