// Package upload is chunked upload (chapter 13, "Chunked upload",
// docs/chapters/13-upload.md). Bytes live in a BlobStore, metadata in PostgreSQL, and
// no commit covers both, so each of the chapter's three leftovers has its
// own answer:
//
//   - bytes written, metadata never committed (a crash, an abandoned
//     upload): every blob is announced in upload_blob before its file is
//     renamed into place, and GC reclaims unreferenced blobs after a grace
//     period; commit and GC serialise on the blob's row (UP-F1, UP-F2);
//   - processing run twice after a lease lapsed: processing is a claim job
//     whose publish commits with its fenced completion (UP-F3);
//   - a read before processing finished: reads serve published files only,
//     from complete blobs (UP-F4).
//
// Chunks are written in place into one partial file per session, at their
// offsets, under a byte-range lock. The whole-file SHA-256 is a running
// hash kept in upload_hash: a chunk that arrives in order is hashed in the
// same pass that writes it; chunks that arrive ahead of a gap are read back
// once the gap is filled. Complete finishes the hash, checks it against the
// declaration (UP-F5) and renames the file to blobs/sha256/<hex>. The bytes
// are written to disk once and hashed once.
package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// Job kinds.
const (
	KindProcess = "upload.process" // one per committed file: sniff, summarise, publish
	kindGC      = "upload.gc"      // periodic: reclaim orphans and abandoned sessions
)

// Service holds the rules of the module.
type Service struct {
	db     *pgxpool.Pool
	jobs   *claim.Client
	store  blobStore
	cfg    Config
	faults *faults.Set
	log    *slog.Logger
	m      *metrics

	storeRecorded atomic.Bool
	bufs          sync.Pool
}

// bufSize is the unit of every streaming copy: the most memory one request
// holds for the bytes it moves (two of these when comparing).
const bufSize = 256 << 10

func (s *Service) buf() *[]byte { return s.bufs.Get().(*[]byte) }

func (s *Service) session(ctx context.Context, p httpx.Principal, id string) (Session, error) {
	if checkSession(id) != nil {
		return Session{}, httpx.InvalidID("id", "a session id (a UUID)") // the one rule for malformed ids
	}
	sess, err := getSession(ctx, s.db, id)
	if err != nil {
		return Session{}, err
	}
	if !p.CanActFor(sess.Owner) {
		return Session{}, errNotOwner
	}
	s.decorate(&sess)
	return sess, nil
}

// decorate fills the derived fields of a session view.
func (s *Service) decorate(sess *Session) {
	if sess.State == SessionOpen || sess.State == SessionCompleted {
		at := sess.touchedAt.Add(s.cfg.Grace)
		sess.ExpiresAt = &at
	}
}

// notOpen is the error for a chunk or complete on a session past open.
func notOpen(sess Session) error {
	switch sess.State {
	case SessionAborted, SessionExpired:
		return fmt.Errorf("%w: session %s is %s", errSessionGone, sess.ID, sess.State)
	case SessionFailed:
		return fmt.Errorf("%w: session %s failed: %s", errSessionNotOpen, sess.ID, sess.Failure)
	}
	return fmt.Errorf("%w: session %s is %s", errSessionNotOpen, sess.ID, sess.State)
}

// CreateSession opens a session for owner after validating the declaration
// against the configured maximums.
func (s *Service) CreateSession(ctx context.Context, owner string, req CreateSessionRequest) (Session, error) {
	sha := strings.ToLower(req.SHA256)
	if checkHex(sha) != nil {
		return Session{}, fmt.Errorf("%w: sha256 must be 64 hex digits", errInvalidDeclaration)
	}
	switch {
	case req.TotalSize < 0:
		return Session{}, fmt.Errorf("%w: total_size must not be negative", errInvalidDeclaration)
	case req.TotalSize > s.cfg.MaxFileSize:
		return Session{}, fmt.Errorf("%w: %d bytes declared, at most %d (%s) accepted",
			errFileTooLarge, req.TotalSize, s.cfg.MaxFileSize, FormatSize(s.cfg.MaxFileSize))
	case req.ChunkCount < 1:
		return Session{}, fmt.Errorf("%w: chunk_count must be at least 1", errInvalidDeclaration)
	case req.ChunkCount > s.cfg.MaxChunks:
		return Session{}, fmt.Errorf("%w: %d chunks declared, at most %d accepted", errTooManyChunks, req.ChunkCount, s.cfg.MaxChunks)
	case req.ChunkSize < 0:
		return Session{}, fmt.Errorf("%w: chunk_size must not be negative", errInvalidDeclaration)
	}
	chunkSize := req.ChunkSize
	if req.TotalSize == 0 {
		if req.ChunkCount != 1 || chunkSize != 0 {
			return Session{}, fmt.Errorf("%w: an empty file is one empty chunk (chunk_count 1, no chunk_size)", errInvalidDeclaration)
		}
	} else {
		if chunkSize == 0 {
			chunkSize = ceilDiv(req.TotalSize, int64(req.ChunkCount))
		}
		if chunkSize > s.cfg.MaxChunkSize {
			return Session{}, fmt.Errorf("%w: chunks of %d bytes, at most %d (%s) accepted",
				errChunkSizeTooLarge, chunkSize, s.cfg.MaxChunkSize, FormatSize(s.cfg.MaxChunkSize))
		}
		if want := ceilDiv(req.TotalSize, chunkSize); want != int64(req.ChunkCount) {
			return Session{}, fmt.Errorf("%w: %d bytes in chunks of %d make %d chunks, not %d",
				errInvalidDeclaration, req.TotalSize, chunkSize, want, req.ChunkCount)
		}
	}
	empty, err := marshalHash(sha256.New())
	if err != nil {
		return Session{}, err
	}
	sess, err := insertSession(ctx, s.db, uuid.NewString(), owner, req.TotalSize, req.ChunkCount, chunkSize, sha, empty)
	if err != nil {
		return Session{}, fmt.Errorf("upload: create session: %w", err)
	}
	s.decorate(&sess)
	return sess, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Session returns a session with the chunks it still misses.
func (s *Service) Session(ctx context.Context, p httpx.Principal, id string) (Session, error) {
	sess, err := s.session(ctx, p, id)
	if err != nil || sess.State != SessionOpen || sess.Received == sess.ChunkCount {
		return sess, err
	}
	sess.Missing, err = missingChunks(ctx, s.db, id, sess.ChunkCount, maxListedMissing)
	return sess, err
}

// Complete verifies that the stored chunks make the declared file (UP-F5)
// and turns them into a blob: finish the running hash, compare, announce
// the blob, rename the file into place, mark the session completed. A mismatch fails
// the session and references nothing. Completing a completed session
// returns it again.
func (s *Service) Complete(ctx context.Context, p httpx.Principal, id string) (Session, error) {
	sess, err := s.session(ctx, p, id)
	if err != nil {
		return Session{}, err
	}
	switch sess.State {
	case SessionCompleted, sessionCommitted:
		return sess, nil
	case SessionOpen:
	default:
		return sess, notOpen(sess)
	}
	if sess.Received < sess.ChunkCount {
		missing, err := missingChunks(ctx, s.db, id, sess.ChunkCount, maxListedMissing)
		if err != nil {
			return sess, err
		}
		return sess, &missingChunksError{Count: sess.ChunkCount, Missing: missing, Total: sess.ChunkCount - sess.Received}
	}
	if err := s.recordStore(ctx); err != nil {
		return sess, err
	}
	sha, size, err := s.hashPartial(ctx, sess)
	if errors.Is(err, fs.ErrNotExist) {
		// An earlier attempt promoted the file and died before marking the
		// session, or a concurrent attempt is doing so right now.
		return s.completeFromBlob(ctx, sess)
	}
	if err != nil {
		return sess, err
	}
	switch {
	case size != sess.TotalSize:
		return sess, s.failSession(ctx, sess, fmt.Errorf("%w: %d bytes stored, %d declared", errSizeMismatch, size, sess.TotalSize))
	case sha != sess.SHA256:
		return sess, s.failSession(ctx, sess, fmt.Errorf("%w: the bytes hash to %s, %s was declared", errSHA256Mismatch, sha, sess.SHA256))
	}
	// UP-F2: the row exists before the file does, so GC never takes these
	// bytes for stray ones, and its touched_at starts their grace period.
	if err := s.announceBlob(ctx, sha, size); err != nil {
		return sess, err
	}
	// UP-F1: the file appears at its address whole, or not at all.
	if err := s.store.Promote(ctx, id, sha); errors.Is(err, fs.ErrNotExist) {
		return s.completeFromBlob(ctx, sess)
	} else if err != nil {
		return sess, fmt.Errorf("upload: promote %s: %w", id, err)
	}
	// UP-02 kills the process here: bytes in place, nothing committed about
	// them. The blob is an orphan until GC reclaims it.
	if err := s.faults.Hit(ctx, faults.AfterBytesWritten, id); err != nil {
		return sess, err
	}
	return s.markCompleted(ctx, sess)
}

// completeFromBlob finishes a completion whose partial file was already
// promoted: the blob row is re-announced first (so GC cannot be midway
// through deleting it), then the file must be there with the declared size.
func (s *Service) completeFromBlob(ctx context.Context, sess Session) (Session, error) {
	if err := s.announceBlob(ctx, sess.SHA256, sess.TotalSize); err != nil {
		return sess, err
	}
	info, err := s.store.StatBlob(ctx, sess.SHA256)
	if err != nil || info.Size != sess.TotalSize {
		if cur, gerr := getSession(ctx, s.db, sess.ID); gerr == nil && cur.State != SessionOpen {
			return s.completedOr(cur)
		}
		return sess, s.failSession(ctx, sess, fmt.Errorf("%w: the partial file of session %s is gone", errSessionGone, sess.ID))
	}
	return s.markCompleted(ctx, sess)
}

func (s *Service) markCompleted(ctx context.Context, sess Session) (Session, error) {
	done, err := markCompleted(ctx, s.db, sess.ID)
	if errors.Is(err, pg.ErrNotFound) {
		// Not open any more: completed by a concurrent attempt (fine), or
		// aborted/expired meanwhile (the blob is an orphan for GC).
		cur, gerr := getSession(ctx, s.db, sess.ID)
		if gerr != nil {
			return sess, gerr
		}
		return s.completedOr(cur)
	}
	if err != nil {
		return sess, err
	}
	s.m.completions.WithLabelValues("completed").Inc()
	s.decorate(&done)
	return done, nil
}

func (s *Service) completedOr(cur Session) (Session, error) {
	s.decorate(&cur)
	if cur.State == SessionCompleted || cur.State == sessionCommitted {
		return cur, nil
	}
	return cur, notOpen(cur)
}

// failSession ends an open session whose bytes broke its declaration and
// removes them; nothing was announced or referenced (UP-F5).
func (s *Service) failSession(ctx context.Context, sess Session, cause error) error {
	if _, err := markFailed(ctx, s.db, sess.ID, cause.Error()); err != nil {
		return err
	}
	s.m.completions.WithLabelValues("failed").Inc()
	if err := s.store.RemovePartial(ctx, sess.ID); err != nil {
		s.log.Warn("upload: cannot remove the partial file of a failed session; GC will", "session", sess.ID, "err", err)
	}
	return cause
}

func (s *Service) announceBlob(ctx context.Context, sha string, size int64) error {
	recorded, err := upsertBlob(ctx, s.db, sha, size)
	if err != nil {
		return fmt.Errorf("upload: announce blob %s: %w", sha, err)
	}
	if recorded != size {
		return fmt.Errorf("upload: blob %s is on record with %d bytes, not %d", sha, recorded, size)
	}
	return nil
}

// recordStore tells the database where this process keeps blobs (for
// UP-F1's file checks) and binds the store to this database, once per
// process, before the first blob is written or swept. A store bound to
// another database is refused: its GC would take that database's blobs
// for stray files and delete them.
func (s *Service) recordStore(ctx context.Context) error {
	if s.storeRecorded.Load() {
		return nil
	}
	id, previous, err := recordStore(ctx, s.db, s.store.Location())
	if err != nil {
		return err
	}
	if previous != "" && previous != s.store.Location() {
		s.log.Warn("upload: this database's blob store moved; blobs written under the old location are not visible here",
			"old", previous, "new", s.store.Location())
	}
	if err := s.store.Bind(ctx, id); err != nil {
		return err
	}
	s.storeRecorded.Store(true)
	return nil
}

// Abort ends an open or completed session and removes its partial file.
// The bytes of a completed one become an orphan for GC.
func (s *Service) Abort(ctx context.Context, p httpx.Principal, id string) (Session, error) {
	sess, err := s.session(ctx, p, id)
	if err != nil {
		return Session{}, err
	}
	if sess.State == SessionAborted {
		return sess, nil
	}
	done, err := abortSession(ctx, s.db, id)
	if errors.Is(err, pg.ErrNotFound) {
		cur, gerr := getSession(ctx, s.db, id)
		if gerr != nil {
			return sess, gerr
		}
		if cur.State == SessionAborted {
			return cur, nil
		}
		return cur, notOpen(cur)
	}
	if err != nil {
		return sess, err
	}
	if err := s.store.RemovePartial(ctx, id); err != nil {
		s.log.Warn("upload: cannot remove the partial file of an aborted session; GC will", "session", id, "err", err)
	}
	return done, nil
}

// Commit records the metadata of a completed session as a file_object that
// references its blob, and enqueues the file's processing in the same
// transaction. It refuses bytes GC has reclaimed or is reclaiming
// (ErrUploadExpired). Committing a committed session with the same name and
// metadata returns its file (created false).
func (s *Service) Commit(ctx context.Context, p httpx.Principal, id string, req CommitRequest) (f File, created bool, err error) {
	name, meta, err := validCommit(req)
	if err != nil {
		return File{}, false, err
	}
	sess, err := s.session(ctx, p, id)
	if err != nil {
		return File{}, false, err
	}
	switch sess.State {
	case sessionCommitted:
		return s.committedFile(ctx, sess, name, meta)
	case SessionOpen:
		return File{}, false, fmt.Errorf("%w: complete session %s first", errNotCompleted, id)
	case SessionCompleted:
	default:
		return File{}, false, notOpen(sess)
	}
	f = File{ID: uuid.NewString(), Owner: sess.Owner, Name: name, Metadata: meta, SHA256: sess.blobSHA256,
		Size: sess.TotalSize, SessionID: id}
	err = pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		// UP-F2: the blob row first (commit and GC lock it in that order).
		if _, err := referenceBlob(ctx, tx, f.SHA256); errors.Is(err, pg.ErrNotFound) {
			return fmt.Errorf("%w: blob %s", errUploadExpired, f.SHA256)
		} else if err != nil {
			return err
		}
		// UP-F1: the file is there now, and stays: GC unlinks only a row it
		// marked 'deleting', under the row's lock, which this transaction
		// holds until it commits with refs raised.
		if _, err := s.store.StatBlob(ctx, f.SHA256); err != nil {
			return fmt.Errorf("%w: %v", errUploadExpired, err)
		}
		if ok, err := markCommitted(ctx, tx, id, f.ID); err != nil || !ok {
			if err == nil {
				err = errCommitRace
			}
			return err
		}
		jobID, _, err := s.jobs.Enqueue(ctx, tx, claim.NewJob{Kind: KindProcess, BusinessKey: f.ID, Payload: processPayload{FileID: f.ID}})
		if err != nil {
			return err
		}
		f.JobID = jobID
		if f, err = insertFile(ctx, tx, f); err != nil {
			return err
		}
		// The commit's last moment: its row locks are held (experiments
		// race GC against it here).
		return s.faults.Hit(ctx, faults.BeforeCommit, id)
	})
	if errors.Is(err, errCommitRace) {
		// The session changed under us: a concurrent commit, abort or expiry.
		cur, gerr := s.session(ctx, p, id)
		if gerr != nil {
			return File{}, false, gerr
		}
		if cur.State == sessionCommitted {
			return s.committedFile(ctx, cur, name, meta)
		}
		return File{}, false, notOpen(cur)
	}
	if err != nil {
		return File{}, false, err
	}
	s.m.commits.Inc()
	return f, true, nil
}

var errCommitRace = errors.New("upload: session changed during commit")

func (s *Service) committedFile(ctx context.Context, sess Session, name string, meta json.RawMessage) (File, bool, error) {
	f, err := getFile(ctx, s.db, sess.FileID)
	if err != nil {
		return File{}, false, err
	}
	if f.Name != name || !jsonEqual(f.Metadata, meta) {
		return File{}, false, fmt.Errorf("%w: session %s is file %s (%q)", errAlreadyCommitted, sess.ID, f.ID, f.Name)
	}
	return f, false, nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// MaxMetadataBytes bounds a file's owner metadata.
const maxMetadataBytes = 16 << 10

func validCommit(req CommitRequest) (string, json.RawMessage, error) {
	name := req.Name
	switch {
	case name == "" || len(name) > 255:
		return "", nil, fmt.Errorf("%w: name must be 1..255 bytes", errInvalidName)
	case !utf8.ValidString(name):
		return "", nil, fmt.Errorf("%w: name must be UTF-8", errInvalidName)
	case strings.ContainsFunc(name, unsafeNameRune):
		return "", nil, fmt.Errorf("%w: name must not contain control, format (bidi) characters or path separators", errInvalidName)
	case strings.Trim(name, ". ") == "":
		return "", nil, fmt.Errorf("%w: name must not be only dots or spaces", errInvalidName)
	}
	meta := bytes.TrimSpace(req.Metadata)
	if len(meta) == 0 || string(meta) == "null" {
		meta = []byte("{}")
	}
	if len(meta) > maxMetadataBytes {
		return "", nil, fmt.Errorf("%w: metadata exceeds %d bytes", errInvalidMetadata, maxMetadataBytes)
	}
	var obj map[string]any
	if meta[0] != '{' || json.Unmarshal(meta, &obj) != nil {
		return "", nil, fmt.Errorf("%w: metadata must be a JSON object", errInvalidMetadata)
	}
	return name, json.RawMessage(meta), nil
}

// File returns a file's metadata (any state) to its owner.
func (s *Service) File(ctx context.Context, p httpx.Principal, id string) (File, error) {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return File{}, httpx.InvalidID("id", "a file id (a UUID)") // the one rule for malformed ids
	}
	f, err := getFile(ctx, s.db, id)
	if err != nil {
		return File{}, err
	}
	if !p.CanActFor(f.Owner) {
		return File{}, errNotOwner
	}
	return f, nil
}

// Open returns a published file and its bytes. UP-F4: a file that is not
// published is ErrNotReady — never its bytes, complete or not. A published
// file's blob is referenced, so GC never removes it (UP-F2).
func (s *Service) Open(ctx context.Context, p httpx.Principal, id string) (File, Blob, error) {
	f, err := s.File(ctx, p, id)
	if err != nil {
		return File{}, nil, err
	}
	if f.State != FilePublished {
		return f, nil, fmt.Errorf("%w: file %s is %s", errNotReady, id, f.State)
	}
	b, err := s.store.OpenBlob(ctx, f.SHA256)
	if err != nil {
		return f, nil, fmt.Errorf("upload: open blob of published file %s: %w", id, err)
	}
	if b.Size() != f.Size {
		b.Close()
		return f, nil, fmt.Errorf("upload: blob of file %s has %d bytes, %d recorded", id, b.Size(), f.Size)
	}
	return f, b, nil
}

// jobKey is the fault-point key of a processing job.
func jobKey(id int64) string { return strconv.FormatInt(id, 10) }

// unsafeNameRune refuses what makes a file name lie or escape when it is
// shown or saved: control characters (C0, DEL, C1), Unicode format
// characters — bidi overrides and isolates ("invoice\u202egpj.exe" shows
// as "invoiceexe.jpg"), zero-width joiners, the BOM — line and paragraph
// separators, and path separators.
func unsafeNameRune(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == '/' || r == '\\' ||
		unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029
}
