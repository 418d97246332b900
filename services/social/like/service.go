package like

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Fault points.
const (
	// PointBeforeCommit: a like or unlike has written its fact and its
	// event, not committed (key: "item>user"). A recompute that runs now
	// does not count it; the consumer applies it once it commits.
	PointBeforeCommit = "social.like.before_commit"
	// PointApplied: the counter's batch has added its events to the
	// counts, inside the batch transaction, with the inbox rows and the
	// position advance written but not committed (key: the consumer name).
	// `fencelab worker --pause-at social.like.applied` stops a real process
	// here, mid-batch (LIKE-02).
	PointApplied = "social.like.applied"
	// PointRecounted: a recompute chunk has written its counts and
	// watermark, not committed; the consumer's batches wait for it (key:
	// the chunk's last item).
	PointRecounted = "social.like.recounted"
)

// DefaultChunk is how many items one recompute transaction recounts.
const DefaultChunk = 1000

// Service is the like counter: facts, events, the counter consumer and the
// recompute. It is safe for concurrent use.
type Service struct {
	pool   *pgxpool.Pool
	faults *faults.Set
	log    *slog.Logger
	chunk  int
	m      *metrics
}

// NewService builds the service from the shared dependencies and its
// settings (LoadConfig).
func NewService(d app.Deps, cfg Config) (*Service, error) {
	chunk := cfg.RecomputeChunk
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	return &Service{pool: d.Pool, faults: d.Faults, log: d.Logger(), chunk: chunk, m: newMetrics(d.Registerer())}, nil
}

// Like makes user like item, in its own transaction.
func (s *Service) Like(ctx context.Context, user string, item int64) (Fact, error) {
	return s.Set(ctx, user, item, true)
}

// Unlike withdraws user's like of item.
func (s *Service) Unlike(ctx context.Context, user string, item int64) (Fact, error) {
	return s.Set(ctx, user, item, false)
}

// Set moves the fact to liked, in its own transaction.
func (s *Service) Set(ctx context.Context, user string, item int64, liked bool) (Fact, error) {
	var f Fact
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		f, err = s.SetTx(ctx, tx, user, item, liked)
		return err
	})
	return f, err
}

// SetTx moves (item, user) to liked inside tx. A change adds one to the
// version and appends exactly one social.like event carrying the new
// state, in tx (LIKE-I1, LIKE-I2); a fact already in that state is left
// alone and no event is written (a repeated click). Liking needs the post
// to be readable by user now (AccessCheck); withdrawing a like never does,
// so a block or a visibility change cannot trap one. Change one fact of an
// item at most once per transaction: LIKE-I2 finds a change's event by
// (item, transaction).
func (s *Service) SetTx(ctx context.Context, tx pgx.Tx, user string, item int64, liked bool) (Fact, error) {
	if !httpx.ValidSubject(user) {
		return Fact{}, ErrInvalidUser
	}
	if item < 1 {
		return Fact{}, ErrInvalidItem
	}
	readable, err := rel.AccessCheck(ctx, tx, user, item)
	if errors.Is(err, rel.ErrPostNotFound) {
		return Fact{}, ErrItemNotFound
	}
	if err != nil {
		return Fact{}, err
	}
	if liked && !readable {
		return Fact{}, ErrForbidden
	}
	f := Fact{ItemID: item, UserID: user}
	sql := sqlUnlike
	if liked {
		sql = sqlLike
	}
	var at time.Time
	err = tx.QueryRow(ctx, sql, item, user).Scan(&f.Liked, &f.Version, &at)
	switch {
	case errors.Is(pg.MapError(err), pg.ErrNotFound):
		// Already in that state: read what is there for the answer.
		err = tx.QueryRow(ctx, sqlFact, item, user).Scan(&f.Liked, &f.Version, &at)
		if errors.Is(pg.MapError(err), pg.ErrNotFound) {
			s.m.click(liked, false)
			return f, nil // never liked: version 0
		}
		if err != nil {
			return Fact{}, fmt.Errorf("social: read like %d/%s: %w", item, user, pg.MapError(err))
		}
		f.UpdatedAt = &at
		s.m.click(liked, false)
		return f, nil
	case err != nil:
		return Fact{}, fmt.Errorf("social: set like %d/%s: %w", item, user, pg.MapError(err))
	}
	f.UpdatedAt, f.Changed = &at, true
	if liked {
		if err := rel.EnsureUser(ctx, tx, user); err != nil { // rel owns social_user
			return Fact{}, err
		}
	}
	ev := Event{ItemID: item, UserID: user, Liked: f.Liked, Version: f.Version}
	if _, err := outbox.Append(ctx, tx, Topic, strconv.FormatInt(item, 10), ev); err != nil {
		return Fact{}, err
	}
	if err := s.faults.Hit(ctx, PointBeforeCommit, strconv.FormatInt(item, 10)+">"+user); err != nil {
		return Fact{}, err
	}
	s.m.click(liked, true)
	return f, nil
}

// Likes is item's count as viewer sees it, with the events the count does
// not include yet and the error bound they make (LIKE-I4), all read in one
// snapshot. ErrItemNotFound, or ErrForbidden when AccessCheck refuses.
func (s *Service) Likes(ctx context.Context, viewer string, item int64) (Likes, error) {
	if item < 1 {
		return Likes{}, ErrInvalidItem
	}
	l := Likes{ItemID: item}
	var found, readable bool
	err := s.pool.QueryRow(ctx, sqlLikes, item, viewer).Scan(&found, &readable, &l.Count, &l.PendingEvents, &l.LagSeconds, &l.Liked)
	if err != nil {
		return Likes{}, fmt.Errorf("social: likes of %d: %w", item, pg.MapError(err))
	}
	if !found {
		return Likes{}, ErrItemNotFound
	}
	if !readable {
		return Likes{}, ErrForbidden
	}
	l.ErrorBound = l.PendingEvents
	return l, nil
}

// Counter is the outbox consumer that keeps social_like_count: +1 per like
// event, -1 per unlike event, exactly once each (the outbox's inbox and
// position commit with the counts), except events a recompute counted.
// Run it with app.ConsumerTask in any number of processes; one holds its lease.
func (s *Service) Counter() outbox.Consumer {
	return outbox.Consumer{Name: ConsumerName, Topics: []string{Topic}, HandleBatch: s.apply}
}

// apply is the counter's batch handler: one statement for the batch.
// The sum is order-independent, so events of one fact delivered in any
// order (overlapping transactions may be) end at the same count.
func (s *Service) apply(ctx context.Context, tx pgx.Tx, evs []outbox.Event) error {
	items, txids, deltas := make([]int64, len(evs)), make([]string, len(evs)), make([]int32, len(evs))
	for i, ev := range evs {
		var e Event
		if err := json.Unmarshal(ev.Payload, &e); err != nil || e.ItemID < 1 || e.Version < 1 {
			// A malformed event is a bug upstream; stopping here makes the
			// lag grow visibly instead of silently miscounting.
			return fmt.Errorf("social: like counter: malformed event %d: %s", ev.ID, ev.Payload)
		}
		items[i], txids[i], deltas[i] = e.ItemID, strconv.FormatUint(ev.TxID, 10), -1
		if e.Liked {
			deltas[i] = 1
		}
	}
	var added int
	if err := tx.QueryRow(ctx, sqlApply, items, txids, deltas).Scan(&added); err != nil {
		return fmt.Errorf("social: like counter: apply %d events: %w", len(evs), pg.MapError(err))
	}
	if err := s.faults.Hit(ctx, PointApplied, ConsumerName); err != nil {
		return err
	}
	s.m.applied(added, len(evs)-added)
	return nil
}

// Recompute recounts every item's likes from the facts (only item, if
// non-zero) while the counter keeps running, in transactions of up to
// chunk items. Each transaction holds the counter's batches off
// (outbox.LockPosition), recounts and records the snapshot it counted in;
// the counter then skips the events that snapshot saw and applies the
// rest, so no increment is lost or applied twice (LIKE-04). A count that
// was wrong is repaired and reported.
func (s *Service) Recompute(ctx context.Context, item int64) (Recount, error) {
	if item < 0 {
		return Recount{}, ErrInvalidItem
	}
	if item > 0 {
		var found bool
		if err := s.pool.QueryRow(ctx, sqlItemExists, item).Scan(&found); err != nil {
			return Recount{}, fmt.Errorf("social: recompute %d: %w", item, pg.MapError(err))
		}
		if !found {
			return Recount{}, ErrItemNotFound
		}
	}
	if err := outbox.Register(ctx, s.pool, s.Counter()); err != nil {
		return Recount{}, err
	}
	var only *int64
	if item > 0 {
		only = &item
	}
	rc := Recount{Corrected: []Correction{}}
	after := int64(0)
	for {
		var n int
		err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := outbox.LockPosition(ctx, tx, ConsumerName); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, sqlRecount, after, s.chunk, only)
			if err != nil {
				return err
			}
			var (
				c     Correction
				ahead int64
			)
			_, err = pgx.ForEachRow(rows, []any{&c.ItemID, &c.Before, &c.After, &ahead, &c.Drift}, func() error {
				n++
				after = c.ItemID
				rc.EventsAhead += ahead
				if c.Drift != 0 {
					rc.Drifted++
					if len(rc.Corrected) < MaxCorrections {
						rc.Corrected = append(rc.Corrected, c)
					}
				}
				return nil
			})
			if err != nil || n == 0 {
				return err
			}
			return s.faults.Hit(ctx, PointRecounted, strconv.FormatInt(after, 10))
		})
		if err != nil {
			return rc, fmt.Errorf("social: recompute likes: %w", pg.MapError(err))
		}
		if n == 0 {
			break
		}
		rc.Items += n
		rc.Chunks++
		if n < s.chunk {
			break
		}
	}
	if rc.Drifted > 0 {
		s.log.Warn("like recompute repaired counts", "items", rc.Items, "drifted", rc.Drifted)
	}
	s.m.recomputed.Add(float64(rc.Items))
	return rc, nil
}
