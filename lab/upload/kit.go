package upload

// The kit the upload chapter's experiments (and its e2e tests) drive the
// app and its blob store with.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/upload"
)

// Lab is one experiment's app, its blob store and two users' tokens.
type Lab struct {
	*lab.App
	Dir   string // the store's root
	Store *upload.LocalStore
	Alice string // user-0042
	Bob   string // user-0043
	Admin string
}

// StartLab starts one experiment's app (on a fresh database, or o.DBURL).
// Its blob store is o.Settings[upload.EnvDir] when set (a second app on
// the first one's blobs), else under the app's data directory.
func StartLab(x *lab.X, o lab.Options) *Lab {
	t := x
	t.Helper()
	a := x.Start(o)
	dir := o.Settings[upload.EnvDir]
	if dir == "" {
		dir = filepath.Join(a.DataDir, "upload")
	}
	store, err := upload.NewLocalStore(dir)
	require.NoError(t, err)
	return &Lab{App: a, Dir: dir, Store: store,
		Alice: a.Token(t, "user-0042", httpx.RoleUser), Bob: a.Token(t, "user-0043", httpx.RoleUser),
		Admin: a.Token(t, "admin-0001", httpx.RoleAdmin)}
}

// Payload is size deterministic pseudo-random bytes and their SHA-256.
func Payload(seed uint64, size int) ([]byte, string) {
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
	_, _ = r.Read(b)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Chunks splits data into chunkSize pieces.
func Chunks(data []byte, chunkSize int) [][]byte {
	var out [][]byte
	for off := 0; off < len(data); off += chunkSize {
		out = append(out, data[off:min(off+chunkSize, len(data))])
	}
	if len(out) == 0 {
		out = [][]byte{{}}
	}
	return out
}

func (l *Lab) Create(t lab.T, tok string, req upload.CreateSessionRequest) lab.Response {
	t.Helper()
	return l.Do(t, lab.Req{Method: "POST", Path: "/upload/sessions", Token: tok, Body: req})
}

// Open creates a session for data in chunks of chunkSize and returns it.
func (l *Lab) Open(t lab.T, tok string, data []byte, chunkSize int, declared string) upload.Session {
	t.Helper()
	req := upload.CreateSessionRequest{TotalSize: int64(len(data)), ChunkCount: len(Chunks(data, chunkSize)), SHA256: declared}
	if len(data) > 0 {
		req.ChunkSize = int64(chunkSize)
	}
	r := l.Create(t, tok, req)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var s upload.Session
	r.JSON(t, &s)
	return s
}

func (l *Lab) Put(t lab.T, tok, id string, n int, body []byte, headers map[string]string) lab.Response {
	t.Helper()
	return l.Do(t, PutReq(tok, id, n, body, headers))
}

func PutReq(tok, id string, n int, body []byte, headers map[string]string) lab.Req {
	return lab.Req{Method: "PUT", Path: fmt.Sprintf("/upload/sessions/%s/chunks/%d", id, n), Token: tok,
		Body: body, Headers: headers}
}

func (l *Lab) Complete(t lab.T, tok, id string) lab.Response {
	t.Helper()
	return l.Do(t, CompleteReq(tok, id))
}

func CompleteReq(tok, id string) lab.Req {
	return lab.Req{Method: "POST", Path: "/upload/sessions/" + id + "/complete", Token: tok}
}

func (l *Lab) Commit(t lab.T, tok, id, name string) lab.Response {
	t.Helper()
	return l.Do(t, CommitReq(tok, id, name))
}

func CommitReq(tok, id, name string) lab.Req {
	return lab.Req{Method: "POST", Path: "/upload/sessions/" + id + "/commit", Token: tok,
		Body: upload.CommitRequest{Name: name, Metadata: []byte(`{"album":"lab"}`)}}
}

func (l *Lab) Read(t lab.T, tok, fileID string, headers map[string]string) lab.Response {
	t.Helper()
	return l.Do(t, lab.Req{Method: "GET", Path: "/upload/files/" + fileID, Token: tok, Headers: headers})
}

func (l *Lab) Gc(t lab.T) upload.GCReport {
	t.Helper()
	return GCReportOf(t, l.Do(t, l.GcReq()))
}

func (l *Lab) GcReq() lab.Req {
	return lab.Req{Method: "POST", Path: "/upload/gc", Token: l.Admin}
}

func GCReportOf(t lab.T, r lab.Response) upload.GCReport {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rep upload.GCReport
	r.JSON(t, &rep)
	return rep
}

// UploadAll sends every chunk in order and completes the session.
func (l *Lab) UploadAll(t lab.T, tok string, data []byte, chunkSize int) upload.Session {
	t.Helper()
	s := l.Open(t, tok, data, chunkSize, SHA256Hex(data))
	for n, c := range Chunks(data, chunkSize) {
		r := l.Put(t, tok, s.ID, n, c, nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	r := l.Complete(t, tok, s.ID)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &s)
	require.Equal(t, upload.SessionCompleted, s.State)
	return s
}

// Committed uploads data and commits it as name; it returns the file.
func (l *Lab) Committed(t lab.T, tok string, data []byte, chunkSize int, name string) upload.File {
	t.Helper()
	s := l.UploadAll(t, tok, data, chunkSize)
	r := l.Commit(t, tok, s.ID, name)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var f upload.File
	r.JSON(t, &f)
	require.Equal(t, upload.FileProcessing, f.State)
	return f
}

// CommittedReport is UP-03's file: Alice's 300 KiB report.bin, uploaded
// in 64 KiB chunks and committed, its processing job waiting. It returns
// the bytes and the file.
func (l *Lab) CommittedReport(t lab.T) ([]byte, upload.File) {
	t.Helper()
	data, _ := Payload(3, 300<<10)
	return data, l.Committed(t, l.Alice, data, 64<<10, "report.bin")
}

// ClaimProcess claims the file's processing job as owner.
func (l *Lab) ClaimProcess(t lab.T, owner string, jobID int64) *claim.Job {
	t.Helper()
	jobs, err := l.Jobs.Claim(context.Background(), claim.ClaimParams{Kinds: []string{upload.KindProcess}, Owner: owner, Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "%s found no processing job to claim", owner)
	require.Equal(t, jobID, jobs[0].ID)
	return jobs[0]
}

// TakeOver is the takeover of f's processing job from the run a holds:
// a's lease lapses (set with SQL: the exact boundary), recovery re-queues
// the job under a higher fence, and runner-b claims it. It returns
// runner-b's job; a still believes it holds the job (UP-F3 is about what
// its late publish may do).
func (l *Lab) TakeOver(x *lab.X, f upload.File, a *claim.Job) *claim.Job {
	t := x
	t.Helper()
	ctx := context.Background()
	l.Exec(t, `UPDATE job SET lease_until = now() - interval '1 second' WHERE id = $1`, f.JobID)
	rec, err := l.Jobs.RecoverExpired(ctx, 10, 0)
	require.NoError(t, err)
	require.Len(t, rec, 1)
	x.Step(lab.Step{Actor: "db", Action: "runner-a's lease lapses; recovery re-queues the job"})
	l.Exec(t, `UPDATE job SET due_at = now() WHERE id = $1`, f.JobID) // skip the re-dispatch jitter
	b := l.ClaimProcess(t, "runner-b", f.JobID)
	require.Greater(t, b.Fence, a.Fence)
	x.Step(lab.Step{Actor: "runner-b", Action: "claim processing of " + f.ID, Outcome: lab.Accepted, Fence: b.Fence})
	return b
}

// Publish runs the file's processing job to completion.
func (l *Lab) Publish(t lab.T, f upload.File) {
	t.Helper()
	j := l.ClaimProcess(t, "runner-"+f.ID[:8], f.JobID)
	require.NoError(t, l.Jobs.Execute(context.Background(), j))
}

func (l *Lab) Exec(t lab.T, sql string, args ...any) {
	t.Helper()
	_, err := l.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (l *Lab) SessionState(t lab.T, id string) upload.SessionState {
	t.Helper()
	var st string
	require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT state FROM upload_session WHERE id = $1`, id).Scan(&st))
	return upload.SessionState(st)
}

// BlobFiles lists the files in the blob directory.
func (l *Lab) BlobFiles(t lab.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(l.Dir, "blobs", "sha256"))
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func (l *Lab) PartialExists(id string) bool {
	_, err := os.Stat(l.Store.PartialPath(id))
	return err == nil
}

// NothingReferenced asserts that no blob row, blob file or file_object
// exists for sha.
func (l *Lab) NothingReferenced(t lab.T, sha string) {
	t.Helper()
	require.Zero(t, l.Count(t, `SELECT count(*) FROM upload_blob WHERE sha256 = $1`, sha), "blob row")
	require.Zero(t, l.Count(t, `SELECT count(*) FROM file_object WHERE blob_sha256 = $1`, sha), "file_object")
	_, err := os.Stat(l.Store.BlobPath(sha))
	require.ErrorIs(t, err, os.ErrNotExist, "blob file")
}

// FileState is a file_object's state.
func (l *Lab) FileState(t lab.T, id string) string {
	t.Helper()
	var st string
	require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT state FROM file_object WHERE id = $1`, id).Scan(&st))
	return st
}
