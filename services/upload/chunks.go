package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"

	"github.com/fencelab/fencelab/core/httpx"
)

// Chunks are written in place, at their offsets in the session's partial
// file, under a byte-range lock; they are recorded (upload_chunk) only once
// their bytes are durable, so a recorded chunk's bytes are final. A
// retransmit of a recorded chunk is compared with them, never written.

// PointChunkRecorded is hit when a chunk PUT has recorded its chunk (the
// bytes durable, the row in) and has not yet advanced the running hash;
// the key is "<session id>/<n>". Experiments pause or fail a writer here
// to show the running hash stays right when the advance is late or never
// comes (UP-F5).
const PointChunkRecorded = "upload.chunk_recorded"

// Checksum is a chunk's SHA-256 as the client sent it (nil: none sent).
type checksum []byte

// PutChunk stores chunk n of a session from body. The first request to
// store a chunk writes it in place under its range lock and records it;
// a retransmit of a stored chunk is compared with the stored bytes: equal
// is success (Stored false), different is ErrChunkConflict. length is the
// request's Content-Length (-1: unknown).
func (s *Service) PutChunk(ctx context.Context, p httpx.Principal, id string, n int, body io.Reader, length int64, sum checksum) (chunkResult, error) {
	sess, err := s.session(ctx, p, id)
	if err != nil {
		return chunkResult{}, err
	}
	if sess.State != SessionOpen {
		return chunkResult{}, notOpen(sess)
	}
	if n < 0 || n >= sess.ChunkCount {
		return chunkResult{}, fmt.Errorf("%w: chunk %d of a %d-chunk session (indexes start at 0)", errChunkOutOfRange, n, sess.ChunkCount)
	}
	off, size := sess.chunkRange(n)
	if length > size {
		return chunkResult{}, fmt.Errorf("%w: chunk %d holds %d bytes, the body has %d", errChunkTooLarge, n, size, length)
	}
	if length >= 0 && length < size {
		return chunkResult{}, fmt.Errorf("%w: chunk %d holds %d bytes, the body has %d", errChunkSize, n, size, length)
	}
	res := chunkResult{Session: id, N: n, Size: size}
	stored, err := chunkStored(ctx, s.db, id, n)
	if err != nil {
		return res, err
	}
	if !stored {
		head, err := s.writeChunk(ctx, sess, n, off, size, body, sum)
		if !errors.Is(err, errStoredMeanwhile) {
			res.Stored = err == nil
			s.m.chunk(res.Stored, err)
			if res.Stored {
				s.m.chunkBytes.Add(float64(size))
				if err := s.faults.Hit(ctx, PointChunkRecorded, id+"/"+strconv.Itoa(n)); err != nil {
					return res, err
				}
				s.advanceHash(ctx, sess, head)
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
var errBody = Errors.New(http.StatusBadRequest, "body_incomplete", "upload: chunk body incomplete")

// writeChunk writes chunk n in place under its range lock and records it.
// When the running hash stands exactly at n (the chunk arrives in order),
// the bytes go to the file and to a copy of the running hash in one pass
// (io.MultiWriter over one pooled buffer), and that hash is returned for
// advanceHash to take over: the chunk is never read back for the
// whole-file digest.
func (s *Service) writeChunk(ctx context.Context, sess Session, n int, off, size int64, body io.Reader, sum checksum) (*streamedChunk, error) {
	part, err := s.store.OpenPartial(ctx, sess.ID, true)
	if err != nil {
		return nil, err
	}
	defer part.Close()
	// One writer per chunk: a retransmit racing the original (or a corrupt
	// one racing a good one) must not interleave bytes in the same range.
	unlock, err := part.LockRange(off, size)
	if errors.Is(err, errRangeBusy) {
		return nil, fmt.Errorf("%w (chunk %d)", errChunkInProgress, n)
	}
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Under the lock, "recorded" means "its bytes are final": recorders
	// hold the lock until their row is in.
	stored, hashed, state, err := chunkStoredAndHash(ctx, s.db, sess.ID, n)
	if err != nil || stored {
		if stored {
			return nil, errStoredMeanwhile
		}
		return nil, err
	}
	if err := part.Allocate(off, size); err != nil {
		return nil, err
	}
	head := streamFrom(n, hashed, state)
	var check hash.Hash
	ws := []io.Writer{io.NewOffsetWriter(part, off)}
	if head != nil {
		ws = append(ws, head.h)
	}
	if sum != nil {
		check = sha256.New()
		ws = append(ws, check)
	}
	dst := ws[0]
	if len(ws) > 1 {
		dst = io.MultiWriter(ws...)
	}
	bp := s.buf()
	defer s.bufs.Put(bp)
	if err := copyExactly(dst, body, size, *bp); err != nil {
		return nil, fmt.Errorf("chunk %d: %w", n, err)
	}
	var shaHex *string
	if sum != nil {
		got := check.Sum(nil)
		if !bytes.Equal(got, sum) {
			return nil, fmt.Errorf("%w: chunk %d hashes to %x, the header says %x", errChunkChecksum, n, got, []byte(sum))
		}
		x := hex.EncodeToString(got)
		shaHex = &x
	}
	if err := part.Sync(); err != nil {
		return nil, err
	}
	ok, err := storeChunk(ctx, s.db, sess.ID, n, size, shaHex)
	if err != nil {
		return nil, err
	}
	if ok {
		return head, nil
	}
	// The session left open while we wrote (aborted, expired, completed).
	if cur, err := getSession(ctx, s.db, sess.ID); err == nil && cur.State != SessionOpen {
		return nil, notOpen(cur)
	}
	return nil, fmt.Errorf("upload: chunk %d of %s was recorded by a writer that did not hold its lock", n, sess.ID)
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
			return fmt.Errorf("%w: %d of %d bytes received", errChunkSize, size-left, size)
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
		return fmt.Errorf("%w: more than %d bytes", errChunkTooLarge, size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %v", errBody, err)
	}
	return nil
}

// compareChunk answers a retransmit of a stored chunk by comparing the
// body with the stored bytes; it never writes.
func (s *Service) compareChunk(ctx context.Context, sess Session, n int, off, size int64, body io.Reader, sum checksum) error {
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
			return fmt.Errorf("%w: chunk %d: %d of %d bytes received", errChunkSize, n, pos+int64(m), size)
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
		return fmt.Errorf("%w: chunk %d", errChunkChecksum, n)
	}
	if !same {
		return fmt.Errorf("%w: chunk %d", errChunkConflict, n)
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
