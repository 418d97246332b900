package upload

import (
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
