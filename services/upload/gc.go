package upload

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// gcBatch bounds the rows one GC statement takes.
const gcBatch = 500

// runGC is the handler of the periodic KindGC job.
func (s *Service) runGC(ctx context.Context, j *claim.Job) error {
	r, err := s.GC(ctx)
	if err != nil {
		return err
	}
	return j.SetResult(r)
}

// GC reclaims what no commit will ever reference (UP-F2), never what one
// does or still may:
//
//  1. open or completed sessions idle for the grace period are expired and
//     their partial files removed;
//  2. partial files of sessions that are not open are removed, and
//     sessions that ended without a file more than SessionRetention ago
//     are deleted with their chunk and hash rows (docs/DATA.md);
//  3. blobs with no reference whose grace period has passed are marked
//     'deleting' — a write on the row commit raises refs on, so the two
//     serialise and a blob is marked only if no commit got there first;
//  4. blob files without a row, older than the grace period, get a
//     'deleting' row. The service announces a row before every rename, so
//     these come from a completion that stalled longer than the grace
//     period between the two, or from a store and a database restored to
//     different points in time;
//  5. every 'deleting' blob is unlinked under its row's lock, then its row
//     deleted — a completion re-announcing the same bytes waits for that
//     lock or revives the row first.
func (s *Service) GC(ctx context.Context) (GCReport, error) {
	var r GCReport
	err := s.gc(ctx, &r)
	s.m.collected(r)
	return r, err
}

func (s *Service) gc(ctx context.Context, r *GCReport) error {
	if err := s.recordStore(ctx); err != nil {
		return err
	}
	for {
		ids, err := expireSessions(ctx, s.db, s.cfg.Grace, gcBatch)
		if err != nil {
			return fmt.Errorf("upload: gc: expire sessions: %w", err)
		}
		for _, id := range ids {
			if err := s.store.RemovePartial(ctx, id); err != nil {
				return err
			}
		}
		r.SessionsExpired += len(ids)
		if len(ids) < gcBatch {
			break
		}
	}
	for {
		n, err := purgeSessions(ctx, s.db, s.cfg.SessionRetention, gcBatch)
		if err != nil {
			return fmt.Errorf("upload: gc: purge ended sessions: %w", err)
		}
		r.SessionsPurged += n
		if n < gcBatch {
			break
		}
	}
	if err := s.sweepPartials(ctx, r); err != nil {
		return err
	}
	for {
		marked, err := markBlobsDeleting(ctx, s.db, s.cfg.Grace, gcBatch)
		if err != nil {
			return fmt.Errorf("upload: gc: mark blobs: %w", err)
		}
		if len(marked) < gcBatch {
			break
		}
	}
	if err := s.sweepBlobs(ctx, r); err != nil {
		return err
	}
	return s.reclaimBlobs(ctx, r)
}

// sweepPartials removes partial files whose session is not open: left by a
// crash between a state change and the removal, or re-created by a chunk
// writer that raced the state change. One run examines the next GCScan
// files after its cursor (gcscan.go).
func (s *Service) sweepPartials(ctx context.Context, r *GCReport) error {
	after, save, err := s.scanWindow(ctx, "partials")
	if err != nil {
		return fmt.Errorf("upload: gc: partials: %w", err)
	}
	ids, err := s.store.PartialsAfter(ctx, after, s.gcScan())
	if err != nil {
		return err
	}
	for batch := range slices.Chunk(ids, gcBatch) {
		closed, err := closedPartials(ctx, s.db, batch)
		if err != nil {
			return fmt.Errorf("upload: gc: partials: %w", err)
		}
		for _, id := range closed {
			if err := s.store.RemovePartial(ctx, id); err != nil {
				return err
			}
		}
		r.StrayPartials += len(closed)
	}
	return save(lastOr(ids, after), len(ids))
}

// sweepBlobs gives blob files without a row, older than the grace period,
// a 'deleting' row so that reclaimBlobs removes them under the same lock
// discipline as every other blob. One run examines the next GCScan files
// after its cursor (gcscan.go).
func (s *Service) sweepBlobs(ctx context.Context, r *GCReport) error {
	cutoff := time.Now().Add(-s.cfg.Grace)
	after, save, err := s.scanWindow(ctx, "blobs")
	if err != nil {
		return fmt.Errorf("upload: gc: stray blobs: %w", err)
	}
	listed, err := s.store.BlobsAfter(ctx, after, s.gcScan())
	if err != nil {
		return err
	}
	names := make([]string, len(listed))
	var old []blobInfo
	for i, b := range listed {
		names[i] = b.SHA256
		// Young files are left alone: a completion announces its row
		// before the rename, but a file we listed a moment before its row
		// appeared must not be judged on that listing.
		if checkHex(b.SHA256) == nil && !b.ModTime.After(cutoff) {
			old = append(old, b)
		}
	}
	for batch := range slices.Chunk(old, gcBatch) {
		shas := make([]string, len(batch))
		infos := make(map[string]blobInfo, len(batch))
		for i, b := range batch {
			shas[i], infos[b.SHA256] = b.SHA256, b
		}
		unknown, err := unknownBlobs(ctx, s.db, shas)
		if err != nil {
			return fmt.Errorf("upload: gc: stray blobs: %w", err)
		}
		for _, sha := range unknown {
			ok, err := tombstone(ctx, s.db, infos[sha])
			if err != nil {
				return fmt.Errorf("upload: gc: stray blob %s: %w", sha, err)
			}
			if ok {
				r.StrayBlobs++
			}
		}
	}
	return save(lastOr(names, after), len(names))
}

// lastOr is the last name examined, or after when there was none.
func lastOr(names []string, after string) string {
	if len(names) == 0 {
		return after
	}
	return names[len(names)-1]
}

// reclaimBlobs unlinks every blob marked 'deleting' and deletes its row.
func (s *Service) reclaimBlobs(ctx context.Context, r *GCReport) error {
	for {
		shas, err := deletingBlobs(ctx, s.db, gcBatch)
		if err != nil {
			return fmt.Errorf("upload: gc: reclaim: %w", err)
		}
		progress := 0
		for _, sha := range shas {
			done, err := s.reclaim(ctx, sha)
			if err != nil {
				return err
			}
			if done {
				progress++
			}
		}
		r.BlobsReclaimed += progress
		if len(shas) < gcBatch || progress == 0 {
			return nil
		}
	}
}

// reclaim removes one 'deleting' blob. The row stays locked from before
// the unlink until its deletion commits: a completion announcing the same
// bytes waits, then inserts a fresh row and renames its file into place
// after the unlink (UP-F2). A row that is no longer 'deleting' (revived) or
// locked by someone else is left for later; a crash after the unlink leaves
// the row 'deleting' and the next run finishes the job.
func (s *Service) reclaim(ctx context.Context, sha string) (bool, error) {
	done := false
	err := pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		locked, err := lockDeleting(ctx, tx, sha)
		if err != nil || !locked {
			return err
		}
		// Experiments pause GC here: it has decided, nothing is gone yet.
		if err := s.faults.Hit(ctx, faults.BeforeUnlink, sha); err != nil {
			return err
		}
		if err := s.store.RemoveBlob(ctx, sha); err != nil {
			return err
		}
		if err := deleteBlobRow(ctx, tx, sha); err != nil {
			return err
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("upload: gc: reclaim blob %s: %w", sha, err)
	}
	return done, nil
}
