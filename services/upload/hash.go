package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// The whole-file SHA-256 is a running hash over the gap-free prefix of
// recorded chunks, its state kept in upload_hash: chunk PUTs advance it as
// chunks arrive, complete finishes it and compares (UP-F5).

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
		h, hashed, err := s.foldChunks(ctx, tx, sess, part, false, nil)
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

// streamedChunk is chunk n's bytes fed to a running hash as they were
// written to the partial file, in the same pass: h continues the saved
// state from (chunks 0..n-1). It is applied only once chunk n is recorded
// (its bytes final) and only if the saved hash still stands at n with that
// state; otherwise it is dropped and the chunk is read back like any other.
type streamedChunk struct {
	n    int
	from []byte
	h    hash.Hash
}

// streamFrom returns a hash positioned at chunk n when the running hash
// (hashed, state, read without a lock) stands exactly there: chunk n
// arrives in order and can be hashed as it is written. Nil otherwise.
func streamFrom(n, hashed int, state []byte) *streamedChunk {
	if hashed != n || state == nil {
		return nil
	}
	h := sha256.New()
	if h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state) != nil {
		return nil
	}
	return &streamedChunk{n: n, from: state, h: h}
}

// advanceHash feeds the chunks that now follow the session's running hash
// without a gap into it, after a chunk PUT stored one: the whole-file hash
// is computed as the chunks arrive, and complete only finishes it. With
// head (the chunk just stored was hashed as it was written) the head's
// state is taken over instead of re-reading that chunk, waiting for a fold
// in progress if need be; without, it is best effort — if another request
// is advancing the hash, or anything fails, complete catches up.
func (s *Service) advanceHash(ctx context.Context, sess Session, head *streamedChunk) {
	err := pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		part, err := s.store.OpenPartial(ctx, sess.ID, false)
		if err != nil {
			return err
		}
		defer part.Close()
		_, _, err = s.foldChunks(ctx, tx, sess, part, head == nil, head)
		return err
	})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("upload: cannot advance the running hash; complete will", "session", sess.ID, "err", err)
	}
}

// foldChunks takes the session's running hash (or, with try, gives up if
// someone holds it), feeds it the stored chunks that follow it without a
// gap — head's state for the first when head is that chunk, the others
// read back from the partial file — and saves it. Recorded chunks are final
// (their rows are written after their bytes, under their range lock), so
// what was hashed never changes. UP-F5 rests on this: the row lock makes
// advances of one session's hash one after the other, and an advance only
// ever extends the prefix the saved state covers.
func (s *Service) foldChunks(ctx context.Context, tx pgx.Tx, sess Session, part partial, try bool, head *streamedChunk) (hash.Hash, int, error) {
	hashed, state, ok, err := lockHash(ctx, tx, sess.ID, try)
	if err != nil || !ok {
		return nil, 0, err
	}
	from := hashed
	var h hash.Hash
	if head != nil && head.n == hashed && bytes.Equal(head.from, state) {
		// The chunk was hashed as it was written, from this very state:
		// take it over, no read back.
		h = head.h
		hashed++
		_, size := sess.chunkRange(head.n)
		s.m.hashed.WithLabelValues("streamed").Add(float64(size))
	} else {
		h = sha256.New()
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
			return nil, 0, fmt.Errorf("upload: session %s: running hash: %w", sess.ID, err)
		}
	}
	stored, err := storedFrom(ctx, tx, sess.ID, hashed)
	if err != nil {
		return nil, 0, err
	}
	bp := s.buf()
	defer s.bufs.Put(bp)
	for _, n := range stored {
		if n != hashed {
			break
		}
		off, size := sess.chunkRange(n)
		if _, err := io.CopyBuffer(h, io.NewSectionReader(part, off, size), *bp); err != nil {
			return nil, 0, err
		}
		s.m.hashed.WithLabelValues("reread").Add(float64(size))
		hashed++
	}
	if hashed == from {
		return h, hashed, nil
	}
	b, err := marshalHash(h)
	if err != nil {
		return nil, 0, err
	}
	return h, hashed, saveHash(ctx, tx, sess.ID, from, hashed, b)
}

func marshalHash(h hash.Hash) ([]byte, error) {
	return h.(encoding.BinaryMarshaler).MarshalBinary()
}
