package upload

import (
	"container/heap"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// GC's bounded scan (docs/DATA.md): each run examines at most Config.GCScan
// entries of the blob directory and of the partial directory, the next
// ones in name order after a cursor persisted in upload_store, and wraps
// to the start once a directory is exhausted. Examining an entry — its
// stat, its database lookup, its removal — is the cost that grows with the
// store; it is bounded per run. Reading the names themselves is one
// getdents pass over the directory with no per-entry system call, and
// memory is GCScan names (a bounded heap): a sharded layout would bound
// that pass too, and belongs to the write path (Promote, BlobPath).
// The rules that keep a file being written now are unchanged: a blob file
// younger than the grace period is never judged, and a partial file is
// removed only when its session is not open.

// DefaultGCScan is Config.GCScan's default.
const defaultGCScan = 10_000

// BlobsAfter describes up to limit blob files whose names sort after
// after, in name order.
func (s *LocalStore) BlobsAfter(ctx context.Context, after string, limit int) ([]blobInfo, error) {
	names, err := namesAfter(ctx, s.blobsDir, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]blobInfo, 0, len(names))
	for _, n := range names {
		info, err := os.Lstat(filepath.Join(s.blobsDir, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since we listed it
		}
		if err != nil {
			return nil, err
		}
		if info.Mode().IsRegular() {
			out = append(out, blobInfo{SHA256: n, Size: info.Size(), ModTime: info.ModTime()})
		}
	}
	return out, nil
}

// PartialsAfter names up to limit partial files (session ids) whose names
// sort after after, in name order.
func (s *LocalStore) PartialsAfter(ctx context.Context, after string, limit int) ([]string, error) {
	names, err := namesAfter(ctx, s.partDir, after, limit)
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if checkSession(n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// namesAfter returns the limit smallest names of dir greater than after,
// sorted, reading the directory in batches and keeping only limit names.
func namesAfter(ctx context.Context, dir, after string, limit int) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	h := &maxHeap{}
	for {
		names, err := d.Readdirnames(512)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for _, n := range names {
			if n <= after {
				continue
			}
			if h.Len() < limit {
				heap.Push(h, n)
			} else if n < (*h)[0] {
				(*h)[0] = n
				heap.Fix(h, 0)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	out := []string(*h)
	slices.Sort(out)
	return out, nil
}

// maxHeap keeps the largest of the names kept on top, to be replaced.
type maxHeap []string

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// scanWindow reads the cursor of one directory ("blobs" or "partials"),
// and saves the next one: the last name examined, or "" (start over) when
// fewer than limit names were left.
func (s *Service) scanWindow(ctx context.Context, which string) (after string, save func(last string, n int) error, err error) {
	after, err = gcCursor(ctx, s.db, which)
	if err != nil {
		return "", nil, err
	}
	return after, func(last string, n int) error {
		next := last
		if n < s.gcScan() {
			next = ""
		}
		return setGCCursor(ctx, s.db, which, next)
	}, nil
}

// gcScan is Config.GCScan, or its default for a Config built by hand.
func (s *Service) gcScan() int {
	if s.cfg.GCScan < 1 {
		return defaultGCScan
	}
	return s.cfg.GCScan
}
