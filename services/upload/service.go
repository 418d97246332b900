// Package upload is chunked upload (spec 50, "Chunked upload"; the book's
// upload chapter). Bytes live in a BlobStore, metadata in PostgreSQL, and
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
// offsets, under a byte-range lock; complete hashes that file once, checks
// it against the declaration (UP-F5) and renames it to blobs/sha256/<hex>.
// The bytes are written to disk once and hashed once.
package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	KindGC      = "upload.gc"      // periodic: reclaim orphans and abandoned sessions
)

// Service holds the rules of the module.
type Service struct {
	db     *pgxpool.Pool
	jobs   *claim.Client
	store  BlobStore
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
		return Session{}, ErrSessionNotFound
	}
	sess, err := getSession(ctx, s.db, id)
	if err != nil {
		return Session{}, err
	}
	if !p.CanActFor(sess.Owner) {
		return Session{}, ErrNotOwner
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
		return fmt.Errorf("%w: session %s is %s", ErrSessionGone, sess.ID, sess.State)
	case SessionFailed:
		return fmt.Errorf("%w: session %s failed: %s", ErrSessionNotOpen, sess.ID, sess.Failure)
	}
	return fmt.Errorf("%w: session %s is %s", ErrSessionNotOpen, sess.ID, sess.State)
}

// CreateSession opens a session for owner after validating the declaration
// against the configured maximums.
func (s *Service) CreateSession(ctx context.Context, owner string, req CreateSessionRequest) (Session, error) {
	sha := strings.ToLower(req.SHA256)
	if checkHex(sha) != nil {
		return Session{}, fmt.Errorf("%w: sha256 must be 64 hex digits", ErrInvalidDeclaration)
	}
	switch {
	case req.TotalSize < 0:
		return Session{}, fmt.Errorf("%w: total_size must not be negative", ErrInvalidDeclaration)
	case req.TotalSize > s.cfg.MaxFileSize:
		return Session{}, fmt.Errorf("%w: %d bytes declared, at most %d (%s) accepted",
			ErrFileTooLarge, req.TotalSize, s.cfg.MaxFileSize, FormatSize(s.cfg.MaxFileSize))
	case req.ChunkCount < 1:
		return Session{}, fmt.Errorf("%w: chunk_count must be at least 1", ErrInvalidDeclaration)
	case req.ChunkCount > s.cfg.MaxChunks:
		return Session{}, fmt.Errorf("%w: %d chunks declared, at most %d accepted", ErrTooManyChunks, req.ChunkCount, s.cfg.MaxChunks)
	case req.ChunkSize < 0:
		return Session{}, fmt.Errorf("%w: chunk_size must not be negative", ErrInvalidDeclaration)
	}
	chunkSize := req.ChunkSize
	if req.TotalSize == 0 {
		if req.ChunkCount != 1 || chunkSize != 0 {
			return Session{}, fmt.Errorf("%w: an empty file is one empty chunk (chunk_count 1, no chunk_size)", ErrInvalidDeclaration)
		}
	} else {
		if chunkSize == 0 {
			chunkSize = ceilDiv(req.TotalSize, int64(req.ChunkCount))
		}
		if chunkSize > s.cfg.MaxChunkSize {
			return Session{}, fmt.Errorf("%w: chunks of %d bytes, at most %d (%s) accepted",
				ErrChunkSizeTooLarge, chunkSize, s.cfg.MaxChunkSize, FormatSize(s.cfg.MaxChunkSize))
		}
		if want := ceilDiv(req.TotalSize, chunkSize); want != int64(req.ChunkCount) {
			return Session{}, fmt.Errorf("%w: %d bytes in chunks of %d make %d chunks, not %d",
				ErrInvalidDeclaration, req.TotalSize, chunkSize, want, req.ChunkCount)
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
	sess.Missing, err = missingChunks(ctx, s.db, id, sess.ChunkCount, MaxListedMissing)
	return sess, err
}

// Checksum is a chunk's SHA-256 as the client sent it (nil: none sent).
type Checksum []byte

// PutChunk stores chunk n of a session from body. The first request to
// store a chunk writes it in place under its range lock and records it;
// a retransmit of a stored chunk is compared with the stored bytes: equal
// is success (Stored false), different is ErrChunkConflict. length is the
// request's Content-Length (-1: unknown).
func (s *Service) PutChunk(ctx context.Context, p httpx.Principal, id string, n int, body io.Reader, length int64, sum Checksum) (ChunkResult, error) {
	sess, err := s.session(ctx, p, id)
	if err != nil {
		return ChunkResult{}, err
	}
	if sess.State != SessionOpen {
		return ChunkResult{}, notOpen(sess)
	}
	if n < 0 || n >= sess.ChunkCount {
		return ChunkResult{}, fmt.Errorf("%w: chunk %d of a %d-chunk session (indexes start at 0)", ErrChunkOutOfRange, n, sess.ChunkCount)
	}
	off, size := sess.chunkRange(n)
	if length > size {
		return ChunkResult{}, fmt.Errorf("%w: chunk %d holds %d bytes, the body has %d", ErrChunkTooLarge, n, size, length)
	}
	if length >= 0 && length < size {
		return ChunkResult{}, fmt.Errorf("%w: chunk %d holds %d bytes, the body has %d", ErrChunkSize, n, size, length)
	}
	res := ChunkResult{Session: id, N: n, Size: size}
	stored, err := chunkStored(ctx, s.db, id, n)
	if err != nil {
		return res, err
	}
	if !stored {
		err := s.writeChunk(ctx, sess, n, off, size, body, sum)
		if !errors.Is(err, errStoredMeanwhile) {
			res.Stored = err == nil
			s.m.chunk(res.Stored, err)
			if res.Stored {
				s.m.chunkBytes.Add(float64(size))
				s.advanceHash(ctx, sess)
			}
			return res, err
		}
	}
	err = s.compareChunk(ctx, sess, n, off, size, body, sum)
	s.m.chunk(false, err)
	return res, err
}

// errStoredMeanwhile: another request stored the chunk between our look
// and our lock; compare instead of writing.
var errStoredMeanwhile = errors.New("upload: chunk stored meanwhile")

// errBody wraps failures to read a request body (the client went away, or
// was too slow): the client's problem, answered with a 400.
var errBody = errors.New("upload: chunk body incomplete")

func init() {
	httpx.MapError(errBody, http.StatusBadRequest, "body_incomplete")
}

func (s *Service) writeChunk(ctx context.Context, sess Session, n int, off, size int64, body io.Reader, sum Checksum) error {
	part, err := s.store.OpenPartial(ctx, sess.ID, true)
	if err != nil {
		return err
	}
	defer part.Close()
	// One writer per chunk: a retransmit racing the original (or a corrupt
	// one racing a good one) must not interleave bytes in the same range.
	unlock, err := part.LockRange(off, size)
	if errors.Is(err, ErrRangeBusy) {
		return fmt.Errorf("%w (chunk %d)", ErrChunkInProgress, n)
	}
	if err != nil {
		return err
	}
	defer unlock()
	// Under the lock, "recorded" means "its bytes are final": recorders
	// hold the lock until their row is in.
	if stored, err := chunkStored(ctx, s.db, sess.ID, n); err != nil || stored {
		if stored {
			return errStoredMeanwhile
		}
		return err
	}
	h := sha256.New()
	dst := io.Writer(io.NewOffsetWriter(part, off))
	if sum != nil {
		dst = io.MultiWriter(dst, h)
	}
	bp := s.buf()
	defer s.bufs.Put(bp)
	if err := copyExactly(dst, body, size, *bp); err != nil {
		return fmt.Errorf("chunk %d: %w", n, err)
	}
	var shaHex *string
	if sum != nil {
		got := h.Sum(nil)
		if !bytes.Equal(got, sum) {
			return fmt.Errorf("%w: chunk %d hashes to %x, the header says %x", ErrChunkChecksum, n, got, []byte(sum))
		}
		x := hex.EncodeToString(got)
		shaHex = &x
	}
	if err := part.Sync(); err != nil {
		return err
	}
	ok, err := storeChunk(ctx, s.db, sess.ID, n, size, shaHex)
	if err != nil || ok {
		return err
	}
	// The session left open while we wrote (aborted, expired, completed).
	if cur, err := getSession(ctx, s.db, sess.ID); err == nil && cur.State != SessionOpen {
		return notOpen(cur)
	}
	return fmt.Errorf("upload: chunk %d of %s was recorded by a writer that did not hold its lock", n, sess.ID)
}

// copyExactly copies exactly size bytes from r to w in buffer-sized writes
// and makes sure r has nothing more.
func copyExactly(w io.Writer, r io.Reader, size int64, buf []byte) error {
	for left := size; left > 0; {
		m, err := io.ReadFull(r, buf[:min(int64(len(buf)), left)])
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return werr
			}
			left -= int64(m)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: %d of %d bytes received", ErrChunkSize, size-left, size)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errBody, err)
		}
	}
	return expectEOF(r, size)
}

func expectEOF(r io.Reader, size int64) error {
	var one [1]byte
	m, err := io.ReadFull(r, one[:])
	if m > 0 {
		return fmt.Errorf("%w: more than %d bytes", ErrChunkTooLarge, size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %v", errBody, err)
	}
	return nil
}

// compareChunk answers a retransmit of a stored chunk by comparing the
// body with the stored bytes; it never writes.
func (s *Service) compareChunk(ctx context.Context, sess Session, n int, off, size int64, body io.Reader, sum Checksum) error {
	part, err := s.store.OpenPartial(ctx, sess.ID, false)
	if err != nil {
		return s.partialTrouble(ctx, sess.ID, err)
	}
	defer part.Close()
	h := sha256.New()
	bp, sp := s.buf(), s.buf()
	defer s.bufs.Put(bp)
	defer s.bufs.Put(sp)
	got, stored := *bp, *sp
	same := true
	for pos := int64(0); pos < size; {
		want := min(int64(len(got)), size-pos)
		m, err := io.ReadFull(body, got[:want])
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: chunk %d: %d of %d bytes received", ErrChunkSize, n, pos+int64(m), size)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errBody, err)
		}
		h.Write(got[:m])
		if same {
			if k, err := part.ReadAt(stored[:m], off+pos); k < m {
				return s.partialTrouble(ctx, sess.ID, err)
			}
			same = bytes.Equal(got[:m], stored[:m])
		}
		pos += int64(m)
	}
	if err := expectEOF(body, size); err != nil {
		return fmt.Errorf("chunk %d: %w", n, err)
	}
	if sum != nil && !bytes.Equal(h.Sum(nil), sum) {
		return fmt.Errorf("%w: chunk %d", ErrChunkChecksum, n)
	}
	if !same {
		return fmt.Errorf("%w: chunk %d", ErrChunkConflict, n)
	}
	return nil
}

// partialTrouble explains a partial file that is missing or short: the
// session is no longer open (the usual case: it was completed or aborted
// meanwhile), or something removed bytes it should not have.
func (s *Service) partialTrouble(ctx context.Context, id string, cause error) error {
	if cur, err := getSession(ctx, s.db, id); err == nil && cur.State != SessionOpen {
		return notOpen(cur)
	}
	return fmt.Errorf("upload: partial file of open session %s unreadable: %w", id, cause)
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
	case SessionCompleted, SessionCommitted:
		return sess, nil
	case SessionOpen:
	default:
		return sess, notOpen(sess)
	}
	if sess.Received < sess.ChunkCount {
		missing, err := missingChunks(ctx, s.db, id, sess.ChunkCount, MaxListedMissing)
		if err != nil {
			return sess, err
		}
		return sess, &MissingChunksError{Count: sess.ChunkCount, Missing: missing, Total: sess.ChunkCount - sess.Received}
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
		return sess, s.failSession(ctx, sess, fmt.Errorf("%w: %d bytes stored, %d declared", ErrSizeMismatch, size, sess.TotalSize))
	case sha != sess.SHA256:
		return sess, s.failSession(ctx, sess, fmt.Errorf("%w: the bytes hash to %s, %s was declared", ErrSHA256Mismatch, sha, sess.SHA256))
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

// hashPartial finishes the session's running hash over every chunk (all
// stored) and returns the digest and the partial file's size.
func (s *Service) hashPartial(ctx context.Context, sess Session) (sha string, size int64, err error) {
	part, err := s.store.OpenPartial(ctx, sess.ID, false)
	if err != nil {
		return "", 0, err
	}
	defer part.Close()
	if size, err = part.Size(); err != nil {
		return "", 0, err
	}
	err = pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		h, hashed, err := s.foldChunks(ctx, tx, sess, part, false)
		if err != nil {
			return err
		}
		if hashed != sess.ChunkCount {
			return fmt.Errorf("upload: session %s: hashed %d of %d stored chunks", sess.ID, hashed, sess.ChunkCount)
		}
		sha = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	return sha, size, err
}

// advanceHash feeds the chunks that now follow the session's running hash
// without a gap into it, after a chunk PUT stored one: the whole-file hash
// is computed as the chunks arrive, and complete only finishes it. It is
// best effort — if another request is advancing the hash, or anything
// fails, complete catches up.
func (s *Service) advanceHash(ctx context.Context, sess Session) {
	err := pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		part, err := s.store.OpenPartial(ctx, sess.ID, false)
		if err != nil {
			return err
		}
		defer part.Close()
		_, _, err = s.foldChunks(ctx, tx, sess, part, true)
		return err
	})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("upload: cannot advance the running hash; complete will", "session", sess.ID, "err", err)
	}
}

// foldChunks takes the session's running hash (or, with try, gives up if
// someone holds it), feeds it the stored chunks that follow it without a
// gap, reading them back from the partial file, and saves it. Recorded
// chunks are final (their rows are written after their bytes, under their
// range lock), so what was hashed never changes.
func (s *Service) foldChunks(ctx context.Context, tx pgx.Tx, sess Session, part Partial, try bool) (hash.Hash, int, error) {
	hashed, state, ok, err := lockHash(ctx, tx, sess.ID, try)
	if err != nil || !ok {
		return nil, 0, err
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, 0, fmt.Errorf("upload: session %s: running hash: %w", sess.ID, err)
	}
	stored, err := storedFrom(ctx, tx, sess.ID, hashed)
	if err != nil {
		return nil, 0, err
	}
	bp := s.buf()
	defer s.bufs.Put(bp)
	from := hashed
	for _, n := range stored {
		if n != hashed {
			break
		}
		off, size := sess.chunkRange(n)
		if _, err := io.CopyBuffer(h, io.NewSectionReader(part, off, size), *bp); err != nil {
			return nil, 0, err
		}
		hashed++
	}
	if hashed == from {
		return h, hashed, nil
	}
	b, err := marshalHash(h)
	if err != nil {
		return nil, 0, err
	}
	return h, hashed, saveHash(ctx, tx, sess.ID, hashed, b)
}

func marshalHash(h hash.Hash) ([]byte, error) {
	return h.(encoding.BinaryMarshaler).MarshalBinary()
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
		return sess, s.failSession(ctx, sess, fmt.Errorf("%w: the partial file of session %s is gone", ErrSessionGone, sess.ID))
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
	if cur.State == SessionCompleted || cur.State == SessionCommitted {
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
	case SessionCommitted:
		return s.committedFile(ctx, sess, name, meta)
	case SessionOpen:
		return File{}, false, fmt.Errorf("%w: complete session %s first", ErrNotCompleted, id)
	case SessionCompleted:
	default:
		return File{}, false, notOpen(sess)
	}
	f = File{ID: uuid.NewString(), Owner: sess.Owner, Name: name, Metadata: meta, SHA256: sess.blobSHA256,
		Size: sess.TotalSize, SessionID: id}
	err = pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		// UP-F2: the blob row first (commit and GC lock it in that order).
		if _, err := referenceBlob(ctx, tx, f.SHA256); errors.Is(err, pg.ErrNotFound) {
			return fmt.Errorf("%w: blob %s", ErrUploadExpired, f.SHA256)
		} else if err != nil {
			return err
		}
		// UP-F1: the file is there now, and stays: GC unlinks only a row it
		// marked 'deleting', under the row's lock, which this transaction
		// holds until it commits with refs raised.
		if _, err := s.store.StatBlob(ctx, f.SHA256); err != nil {
			return fmt.Errorf("%w: %v", ErrUploadExpired, err)
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
		if cur.State == SessionCommitted {
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
		return File{}, false, fmt.Errorf("%w: session %s is file %s (%q)", ErrAlreadyCommitted, sess.ID, f.ID, f.Name)
	}
	return f, false, nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// MaxMetadataBytes bounds a file's owner metadata.
const MaxMetadataBytes = 16 << 10

func validCommit(req CommitRequest) (string, json.RawMessage, error) {
	name := req.Name
	switch {
	case name == "" || len(name) > 255:
		return "", nil, fmt.Errorf("%w: name must be 1..255 bytes", ErrInvalidName)
	case !utf8.ValidString(name):
		return "", nil, fmt.Errorf("%w: name must be UTF-8", ErrInvalidName)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '/' || r == '\\' }):
		return "", nil, fmt.Errorf("%w: name must not contain control characters or path separators", ErrInvalidName)
	}
	meta := bytes.TrimSpace(req.Metadata)
	if len(meta) == 0 || string(meta) == "null" {
		meta = []byte("{}")
	}
	if len(meta) > MaxMetadataBytes {
		return "", nil, fmt.Errorf("%w: metadata exceeds %d bytes", ErrInvalidMetadata, MaxMetadataBytes)
	}
	var obj map[string]any
	if meta[0] != '{' || json.Unmarshal(meta, &obj) != nil {
		return "", nil, fmt.Errorf("%w: metadata must be a JSON object", ErrInvalidMetadata)
	}
	return name, json.RawMessage(meta), nil
}

// File returns a file's metadata (any state) to its owner.
func (s *Service) File(ctx context.Context, p httpx.Principal, id string) (File, error) {
	if _, err := uuid.Parse(id); err != nil {
		return File{}, ErrFileNotFound
	}
	f, err := getFile(ctx, s.db, id)
	if err != nil {
		return File{}, err
	}
	if !p.CanActFor(f.Owner) {
		return File{}, ErrNotOwner
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
		return f, nil, fmt.Errorf("%w: file %s is %s", ErrNotReady, id, f.State)
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
