package upload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/google/uuid"
)

// BlobStore is where an upload's bytes live: one partial file per open
// session, into which chunks are written at their offsets, and immutable
// content-addressed blobs. No transaction spans the store and the database;
// the service orders its steps so that every leftover of a crash is either
// harmless or found and reclaimed by GC (UP-F1, UP-F2).
//
// LocalStore is the implementation: a directory on one host (or a shared
// file system with working byte-range locks). An object-store backend would
// map partial files to multipart uploads and Promote to their completion.
type blobStore interface {
	// Location names the store for `fencelab check` (an absolute directory).
	Location() string
	// Bind ties the store to one database (its store id): the first call
	// records id in the store, later ones must present the same id, else
	// errStoreBound. One store per database keeps GC from sweeping another
	// database's blobs as stray ones.
	Bind(ctx context.Context, id string) error

	// OpenPartial opens a session's partial file; when it does not exist
	// it is created empty if create is set, else the error is fs.ErrNotExist.
	OpenPartial(ctx context.Context, session string, create bool) (partial, error)
	// RemovePartial deletes a session's partial file; a missing one is fine.
	RemovePartial(ctx context.Context, session string) error
	// Partials calls fn for every partial file present.
	Partials(ctx context.Context, fn func(session string, modTime time.Time) error) error
	// Promote makes a session's verified partial file the blob sha256, so
	// that blobs/sha256/<sha256> holds either nothing or all of the bytes:
	// fsync the file, rename it into place, fsync the directory (UP-F1).
	Promote(ctx context.Context, session, sha256 string) error

	// OpenBlob opens a blob for reading; ErrBlobMissing if it does not exist.
	OpenBlob(ctx context.Context, sha256 string) (Blob, error)
	// StatBlob describes a blob; ErrBlobMissing if it does not exist.
	StatBlob(ctx context.Context, sha256 string) (blobInfo, error)
	// RemoveBlob unlinks a blob durably (the directory is fsynced); a
	// missing blob is fine.
	RemoveBlob(ctx context.Context, sha256 string) error
	// Blobs calls fn for every blob file present.
	Blobs(ctx context.Context, fn func(blobInfo) error) error

	// BlobsAfter and PartialsAfter are GC's bounded scan (gcscan.go): up
	// to limit files whose names sort after after, in name order.
	BlobsAfter(ctx context.Context, after string, limit int) ([]blobInfo, error)
	PartialsAfter(ctx context.Context, after string, limit int) ([]string, error)
}

// Partial is one session's partial file. Chunk writers lock their chunk's
// byte range, so two writers of one chunk (a retransmit racing the
// original) never interleave their bytes.
type partial interface {
	io.ReaderAt
	io.WriterAt
	// LockRange takes an exclusive lock on [off, off+n) against every other
	// opener of the file, other processes included; ErrRangeBusy if someone
	// holds an overlapping lock. The lock ends with unlock or Close, or when
	// the process dies.
	LockRange(off, n int64) (unlock func(), err error)
	// Allocate reserves the disk blocks of [off, off+n) before a chunk is
	// written there, without changing the file's size. Best effort: where
	// the file system cannot, it does nothing; a full disk is an error.
	Allocate(off, n int64) error
	// Sync makes what was written durable.
	Sync() error
	// Size is the file's current size.
	Size() (int64, error)
	Close() error
}

// Blob is an open blob: a seekable reader of known size.
type Blob interface {
	io.ReadSeekCloser
	io.ReaderAt
	Size() int64
	ModTime() time.Time
}

// BlobInfo describes a blob file.
type blobInfo struct {
	SHA256  string
	Size    int64
	ModTime time.Time
}

var (
	// errBlobMissing: no file for that blob.
	errBlobMissing = errors.New("upload: blob file missing")
	// errRangeBusy: another writer holds the byte range.
	errRangeBusy = errors.New("upload: byte range locked by another writer")
	// errStoreBound: the store belongs to another database.
	errStoreBound = errors.New("upload: blob store is bound to another database")
)

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// LocalStore keeps blobs in a directory:
//
//	<root>/blobs/sha256/<hex>   content-addressed, immutable, complete
//	<root>/partial/<session>    a session's chunks at their offsets
//
// Both live on one file system, so promotion is a rename.
type LocalStore struct {
	root     string
	blobsDir string
	partDir  string
}

var _ blobStore = (*LocalStore)(nil)

// NewLocalStore opens (creating if needed) a store rooted at dir.
func NewLocalStore(dir string) (*LocalStore, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &LocalStore{root: root, blobsDir: filepath.Join(root, "blobs", "sha256"), partDir: filepath.Join(root, "partial")}
	for _, d := range []string{s.blobsDir, s.partDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("upload: blob store: %w", err)
		}
	}
	return s, nil
}

// Location is the store's root directory.
func (s *LocalStore) Location() string { return s.root }

// markerName is the file in the store's root naming the database (store
// id) the store belongs to.
const markerName = "store-id"

func (s *LocalStore) Bind(_ context.Context, id string) error {
	path := filepath.Join(s.root, markerName)
	b, err := os.ReadFile(path)
	if err == nil {
		if got := string(bytes.TrimSpace(b)); got != id {
			return fmt.Errorf("%w: %s holds store %s, this database is store %s", errStoreBound, s.root, got, id)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Written under a temporary name and linked into place: of two
	// processes binding at once, one wins and the other re-reads.
	tmp, err := os.CreateTemp(s.root, markerName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := syncDir(s.root); err != nil {
		return err
	}
	return s.Bind(context.Background(), id)
}

// BlobPath is where blob sha256 lives (tests and tools look at it).
func (s *LocalStore) BlobPath(sha256 string) string { return filepath.Join(s.blobsDir, sha256) }

// PartialPath is where a session's partial file lives.
func (s *LocalStore) PartialPath(session string) string { return filepath.Join(s.partDir, session) }

func checkHex(sha256 string) error {
	if !hexRE.MatchString(sha256) {
		return fmt.Errorf("upload: %q is not a lowercase hex SHA-256", sha256)
	}
	return nil
}

func checkSession(session string) error {
	if u, err := uuid.Parse(session); err != nil || u.String() != session {
		return fmt.Errorf("upload: %q is not a session id", session)
	}
	return nil
}

func (s *LocalStore) OpenPartial(_ context.Context, session string, create bool) (partial, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(s.PartialPath(session), flags, 0o640)
	if err != nil {
		return nil, err
	}
	return &localPartial{File: f}, nil
}

func (s *LocalStore) RemovePartial(_ context.Context, session string) error {
	if err := checkSession(session); err != nil {
		return err
	}
	return ignoreNotExist(os.Remove(s.PartialPath(session)))
}

func (s *LocalStore) Partials(ctx context.Context, fn func(string, time.Time) error) error {
	return eachEntry(ctx, s.partDir, func(name string, info fs.FileInfo) error {
		if checkSession(name) != nil {
			return nil // not ours; leave it
		}
		return fn(name, info.ModTime())
	})
}

func (s *LocalStore) Promote(_ context.Context, session, sha256 string) error {
	if err := checkSession(session); err != nil {
		return err
	}
	if err := checkHex(sha256); err != nil {
		return err
	}
	src := s.PartialPath(session)
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// The same bytes may already be there (another upload of the same
	// content): replacing them is atomic and changes nothing a reader sees.
	if err := os.Rename(src, s.BlobPath(sha256)); err != nil {
		return err
	}
	return syncDir(s.blobsDir)
}

func (s *LocalStore) OpenBlob(_ context.Context, sha256 string) (Blob, error) {
	if err := checkHex(sha256); err != nil {
		return nil, err
	}
	f, err := os.Open(s.BlobPath(sha256))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", errBlobMissing, sha256)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return localBlob{File: f, size: st.Size(), mod: st.ModTime()}, nil
}

func (s *LocalStore) StatBlob(_ context.Context, sha256 string) (blobInfo, error) {
	if err := checkHex(sha256); err != nil {
		return blobInfo{}, err
	}
	st, err := os.Stat(s.BlobPath(sha256))
	if errors.Is(err, fs.ErrNotExist) {
		return blobInfo{}, fmt.Errorf("%w: %s", errBlobMissing, sha256)
	}
	if err != nil {
		return blobInfo{}, err
	}
	return blobInfo{SHA256: sha256, Size: st.Size(), ModTime: st.ModTime()}, nil
}

func (s *LocalStore) RemoveBlob(_ context.Context, sha256 string) error {
	if err := checkHex(sha256); err != nil {
		return err
	}
	if err := ignoreNotExist(os.Remove(s.BlobPath(sha256))); err != nil {
		return err
	}
	return syncDir(s.blobsDir)
}

func (s *LocalStore) Blobs(ctx context.Context, fn func(blobInfo) error) error {
	return eachEntry(ctx, s.blobsDir, func(name string, info fs.FileInfo) error {
		return fn(blobInfo{SHA256: name, Size: info.Size(), ModTime: info.ModTime()})
	})
}

// eachEntry calls fn for the regular files of dir, reading the directory
// in batches so a large one is never held in memory at once.
func eachEntry(ctx context.Context, dir string, fn func(string, fs.FileInfo) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		ents, err := d.ReadDir(512)
		for _, e := range ents {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !e.Type().IsRegular() {
				continue
			}
			info, ierr := e.Info()
			if errors.Is(ierr, fs.ErrNotExist) {
				continue // removed while we listed
			}
			if ierr != nil {
				return ierr
			}
			if err := fn(e.Name(), info); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

type localPartial struct{ *os.File }

func (p *localPartial) LockRange(off, n int64) (func(), error) { return lockRange(p.File, off, n) }

func (p *localPartial) Allocate(off, n int64) error { return allocate(p.File, off, n) }

func (p *localPartial) Size() (int64, error) {
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

type localBlob struct {
	*os.File
	size int64
	mod  time.Time
}

func (b localBlob) Size() int64        { return b.size }
func (b localBlob) ModTime() time.Time { return b.mod }
