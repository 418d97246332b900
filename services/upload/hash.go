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
	"strconv"
	"sync"
	"time"

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
		h, hashed, err := s.foldChunks(ctx, tx, sess, part, false, nil, nil)
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
// state is taken over instead of re-reading that chunk: the writer first
// waits (bounded) for this process's writers of the chunks before it to
// advance the hash to it, then waits for a fold in progress if need be;
// without, it is best effort — if another request is advancing the hash,
// or anything fails, complete catches up.
func (s *Service) advanceHash(ctx context.Context, sess Session, head *streamedChunk, tk *ticket) {
	if head != nil {
		tk.awaitSaved(ctx, s)
	}
	s.fold(ctx, sess, head, head == nil, tk)
}

// fold runs foldChunks in a transaction and tells the relay what it saved.
func (s *Service) fold(ctx context.Context, sess Session, head *streamedChunk, try bool, tk *ticket) {
	hashed := -1
	var h hash.Hash
	err := pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		part, err := s.store.OpenPartial(ctx, sess.ID, false)
		if err != nil {
			return err
		}
		defer part.Close()
		h, hashed, err = s.foldChunks(ctx, tx, sess, part, try, head, tk.streamedHere)
		return err
	})
	if err == nil && hashed >= 0 {
		// What the fold saved is where the line stands now: a writer
		// waiting behind chunks that were read back starts from it.
		if st, merr := marshalHash(h); merr == nil {
			tk.saved(hashed, st)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn("upload: cannot advance the running hash; complete will", "session", sess.ID, "err", err)
	}
}

// foldChunks takes the session's running hash (or, with try, gives up if
// someone holds it), feeds it the stored chunks that follow it without a
// gap — head's state when head is the chunk next and started from the
// state reached, the others read back from the partial file, stopping
// short of a chunk streamedElsewhere says another request of this process
// hashed as it wrote it and will fold in itself — and saves it. Recorded chunks are final
// (their rows are written after their bytes, under their range lock), so
// what was hashed never changes. UP-F5 rests on this: the row lock makes
// advances of one session's hash one after the other, and an advance only
// ever extends the prefix the saved state covers.
func (s *Service) foldChunks(ctx context.Context, tx pgx.Tx, sess Session, part Partial, try bool, head *streamedChunk, streamedElsewhere func(n int) bool) (hash.Hash, int, error) {
	hashed, state, ok, err := lockHash(ctx, tx, sess.ID, try)
	if err != nil || !ok {
		return nil, -1, err
	}
	from := hashed
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
	cur := state // h's state, marshalled (nil: not yet)
	for _, n := range stored {
		if n != hashed || (streamedElsewhere != nil && streamedElsewhere(n)) {
			// A gap, or a chunk another request here hashed as it wrote it
			// and is about to fold in itself: stop short of it.
			break
		}
		off, size := sess.chunkRange(n)
		if head != nil && head.n == n {
			if cur == nil {
				if cur, err = marshalHash(h); err != nil {
					return nil, 0, err
				}
			}
			if bytes.Equal(head.from, cur) {
				// The chunk was hashed as it was written, from this very
				// state: take it over, no read back.
				h, cur = head.h, nil
				hashed++
				s.m.hashed.WithLabelValues("streamed").Add(float64(size))
				continue
			}
		}
		if _, err := io.CopyBuffer(h, io.NewSectionReader(part, off, size), *bp); err != nil {
			return nil, 0, err
		}
		cur = nil
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

// The relay: chunks that arrive together are hashed as they are written.
//
// A client that sends several chunks at once (the usual way to fill a
// link) makes every chunk but the first arrive ahead of the running hash,
// and a chunk ahead of the hash is read back from the partial file once
// the gap closes: a second pass over its bytes. When the chunks in the gap
// are in the hands of this very process, there is no need: the writer of
// chunk n waits, before reading its body, until the writer of chunk n-1
// has written all of its bytes and hands on the hash state they ended in;
// it then hashes its own bytes as it writes them, from that state, and
// hands on in turn. Bodies of one session are then read one after the
// other (their syncs and rows still overlap), and every byte is hashed
// once, from memory.
//
// A handed-on state is only ever a guess: the chunk before may still fail
// to be recorded and be sent again with other bytes. It is never saved as
// such. foldChunks takes a streamed chunk over only when the saved state
// (or the state after reading back the chunks before it) equals the state
// the writer started from, byte for byte: a different prefix would need a
// SHA-256 collision to give the same state (UP-F5).
//
// Waiting is bounded. A writer waits only while every chunk between the
// line's state and its own is either with a request of this process or
// recorded by one (then a fold by one of those requests will read it back
// and move the line), and never longer than relayWait. When a chunk in
// between has no one here (another process writes it, or its writer
// failed), the waiter writes without hashing and its chunk is read back
// as before.

// relayWait bounds each of a writer's two waits (for the state to start
// from, and for the saved hash to reach its chunk): a fraction of the
// chunk timeout, so a waiter still has the time to read its own body.
func (s *Service) relayWait() time.Duration { return s.cfg.ChunkTimeout / 4 }

// PointChunkAwaits is hit when a chunk's writer starts waiting for the
// hash state of the chunk before it, written by another request of this
// process; the key is "<session id>/<n>".
const PointChunkAwaits = "upload.chunk_awaits"

// PointChunkWritten is hit when a chunk's bytes are written (and its hash
// state handed on to the next chunk's writer) and not yet synced or
// recorded; the key is "<session id>/<n>". Experiments fail a writer here
// to show a handed-on state whose chunk then never lands is not used.
const PointChunkWritten = "upload.chunk_written"

type relay struct {
	mu    sync.Mutex
	lines map[string]*line
}

// line is one session's relay in this process.
type line struct {
	active   map[int]int      // chunk n → requests for it here (writers, retransmits)
	recorded map[int]struct{} // chunks recorded here, not yet known to be in the saved hash
	heads    map[int]int      // chunks whose writer here hashed them as it wrote them and has not folded yet
	at       int              // state is the running hash after chunks [0, at)
	state    []byte           // nil: none known
	saved    int              // the saved running hash covers at least [0, saved)
	wake     chan struct{}    // closed (and replaced) on every change
}

// ticket is one chunk request's place in its session's line, from its
// arrival (before any query: a writer deciding whether to wait must see
// the requests for the chunks before its own that are on their way) to
// the end of its hash advance.
type ticket struct {
	r       *relay
	session string
	n       int
	l       *line
	head    bool // in heads: hashed as written, not folded yet
}

// arrive enters a request for chunk n of session in the line.
func (r *relay) arrive(session string, n int) *ticket {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lines == nil {
		r.lines = map[string]*line{}
	}
	l := r.lines[session]
	if l == nil {
		l = &line{active: map[int]int{}, recorded: map[int]struct{}{}, heads: map[int]int{}, wake: make(chan struct{})}
		r.lines[session] = l
	}
	l.active[n]++
	l.broadcast()
	return &ticket{r: r, session: session, n: n, l: l}
}

func (l *line) broadcast() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// learn records a saved running hash: hashed chunks, state. The saved
// state is the truth: it replaces a handed-on one at or behind it.
func (l *line) learn(hashed int, state []byte) {
	if hashed > l.saved {
		l.saved = hashed
		for k := range l.recorded {
			if k < hashed {
				delete(l.recorded, k)
			}
		}
	}
	if state != nil && hashed >= l.at {
		l.at, l.state = hashed, state
	}
	l.broadcast()
}

// leave takes the request out of the line; the line goes with its last
// request.
func (t *ticket) leave() {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.dropHead()
	if t.l.active[t.n]--; t.l.active[t.n] <= 0 {
		delete(t.l.active, t.n)
	}
	if len(t.l.active) == 0 && t.r.lines[t.session] == t.l {
		delete(t.r.lines, t.session)
	}
	t.l.broadcast()
}

// writing is called by the request that is to write the chunk, under its
// range lock, with the saved hash it read there (hashed < 0: none).
func (t *ticket) writing(hashed int, state []byte) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.l.at > t.n {
		// A state past this chunk came from an earlier attempt at it that
		// was never recorded (else this writer would not be writing it):
		// its bytes may differ from the ones coming now.
		t.l.at, t.l.state = 0, nil
	}
	if hashed >= 0 {
		t.l.learn(hashed, state)
	}
}

// streaming marks the writer as hashing its chunk as it writes it: until
// its own fold (or its end), other folds stop before its chunk rather than
// read back bytes whose hash it holds.
func (t *ticket) streaming() {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.head = true
	t.l.heads[t.n]++
}

func (t *ticket) dropHead() {
	if t.head {
		t.head = false
		if t.l.heads[t.n]--; t.l.heads[t.n] <= 0 {
			delete(t.l.heads, t.n)
		}
	}
}

// streamedHere says whether chunk n's writer in this process holds its
// streamed hash and has yet to fold it (false for the caller's own chunk:
// its fold is the one taking it over).
func (t *ticket) streamedHere(n int) bool {
	if t == nil || n == t.n {
		return false
	}
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	return t.l.heads[n] > 0
}

// handOn publishes the hash state after the writer's chunk for the next
// chunk's writer.
func (t *ticket) handOn(state []byte) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.l.at == t.n {
		t.l.at, t.l.state = t.n+1, state
		t.l.broadcast()
	}
}

// record notes that the writer's chunk is recorded: a fold may now read it.
func (t *ticket) record() {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.n >= t.l.saved {
		t.l.recorded[t.n] = struct{}{}
	}
	t.l.broadcast()
}

// saved records the running hash a fold saved: hashed chunks, state.
func (t *ticket) saved(hashed int, state []byte) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.l.learn(hashed, state)
}

// gap says whether every chunk in [from, t.n) is with a request here or
// recorded here (lively), and whether some request is still at work on
// one of them (else only a fold moves the line).
func (t *ticket) gap(from int) (lively, working bool) {
	for k := from; k < t.n; k++ {
		_, rec := t.l.recorded[k]
		if t.l.active[k] > 0 {
			working = true
		} else if !rec {
			return false, false
		}
	}
	return true, working
}

// await waits, bounded, for the hash state after chunks [0, n): it returns
// that state, or nil when it will not come from this process in time.
func (s *Service) await(ctx context.Context, t *ticket) []byte {
	timer := time.NewTimer(s.relayWait())
	defer timer.Stop()
	announced := false
	for {
		t.r.mu.Lock()
		l := t.l
		if l.at == t.n && l.state != nil {
			st := l.state
			t.r.mu.Unlock()
			return st
		}
		at := l.at
		lively, working := t.gap(at)
		wake := l.wake
		t.r.mu.Unlock()
		switch {
		case at > t.n || !lively:
			return nil
		case !announced:
			announced = true
			if s.faults.Hit(ctx, PointChunkAwaits, t.session+"/"+strconv.Itoa(t.n)) != nil {
				return nil
			}
			continue
		case !working:
			// Only recorded chunks stand between the line and this one,
			// and no request here is left to fold them in.
			return nil
		}
		select {
		case <-wake:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// awaitSaved waits, bounded, until the saved running hash reaches the
// writer's chunk, while the chunks before it down to the saved hash are
// with requests here that will advance it: then the writer's streamed
// state is taken over by its own fold rather than dropped by a fold that
// came too early.
func (t *ticket) awaitSaved(ctx context.Context, s *Service) {
	timer := time.NewTimer(s.relayWait())
	defer timer.Stop()
	for {
		t.r.mu.Lock()
		l := t.l
		_, working := t.gap(l.saved)
		done := l.saved >= t.n || !working
		wake := l.wake
		t.r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
