package upload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// process is the handler of KindProcess: learn the file's content type and
// size, then publish it — once (UP-F3).
//
// The run holds the job under a lease with a fence (the claim engine). Its
// publish and the job's completion commit in one transaction, and the
// completion is fenced: if the lease lapsed and another run was granted a
// higher fence, CompleteTx returns claim.ErrStaleFence and the publish
// rolls back with it. A superseded run therefore never publishes, whether
// it wakes before or after its successor; the conditional UPDATE (only
// from 'processing') and the trigger (publication is final) stand behind
// the fence.
func (s *Service) process(ctx context.Context, j *claim.Job) error {
	var p processPayload
	if err := j.UnmarshalPayload(&p); err != nil || p.FileID == "" {
		return claim.Permanent(fmt.Errorf("upload: process job %d: bad payload %s", j.ID, j.Payload))
	}
	f, err := getFile(ctx, s.db, p.FileID)
	if errors.Is(err, errFileNotFound) {
		return claim.Permanent(err)
	}
	if err != nil {
		return err
	}
	sum, err := s.summarise(ctx, f)
	if err != nil {
		return err
	}
	// UP-03 pauses a run here: its work is done and nothing is published.
	if err := s.faults.Hit(ctx, faults.BeforeCommit, jobKey(j.ID)); err != nil {
		return err
	}
	err = pg.InTx(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := publish(ctx, tx, f.ID, sum, j.Fence, j.Owner); errors.Is(err, pg.ErrNotFound) {
			return fmt.Errorf("%w: file %s", errAlreadyPublished, f.ID)
		} else if err != nil {
			return err
		}
		return s.jobs.CompleteTx(ctx, tx, j, sum)
	})
	if err == nil {
		s.m.publishes.Inc()
	}
	return err
}

// summarise sniffs the content type from the first 512 bytes (the
// algorithm of the WHATWG MIME sniffing standard, as net/http implements
// it) and summarises the size.
func (s *Service) summarise(ctx context.Context, f File) (Summary, error) {
	b, err := s.store.OpenBlob(ctx, f.SHA256)
	if err != nil {
		return Summary{}, err
	}
	defer b.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(b, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return Summary{}, err
	}
	return Summary{ContentType: http.DetectContentType(head[:n]), Bytes: b.Size(), Human: FormatSize(b.Size())}, nil
}
