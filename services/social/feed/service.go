package feed

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Service reads home feeds and runs the fan-out consumer.
type Service struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	m    *metrics
}

// NewService builds the service from the shared dependencies and its
// settings (LoadConfig).
func NewService(d app.Deps, cfg Config) (*Service, error) {
	if cfg.Strategy == nil {
		return nil, errors.New("feed: no strategy configured")
	}
	if len(cfg.CursorKey) < 16 {
		return nil, errors.New("feed: cursor key must be at least 16 bytes (derive it with CursorKey from the token secret)")
	}
	if cfg.Threshold < 1 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.BackfillPosts == 0 {
		cfg.BackfillPosts = defaultBackfillPosts
	}
	if cfg.BackfillPosts < MinBackfillPosts {
		return nil, fmt.Errorf("feed: backfill of %d posts: want at least %d", cfg.BackfillPosts, MinBackfillPosts)
	}
	return &Service{pool: d.Pool, cfg: cfg, log: d.Logger(), m: newMetrics(d.Registerer())}, nil
}

// Strategy is the configured strategy.
func (s *Service) Strategy() Strategy { return s.cfg.Strategy }

// strategyOf returns the strategy a cursor's code names.
func (s *Service) strategyOf(code byte) (Strategy, bool) {
	for _, name := range Strategies {
		if strategyCode(name) == code {
			st, err := ParseStrategy(name, s.cfg.Threshold)
			return st, err == nil
		}
	}
	return nil, false
}

// Read returns one page of reader's home feed: posts of authors reader
// follows now, that reader may read now, newest first, from q's cursor.
// Every post is re-checked in the page's own statement — AccessCheck
// (social_readable_posts) and the follow on the truth table — whatever
// the inbox holds (FEED-I1). The cursor is bound to reader and strategy;
// any other is errInvalidCursor.
func (s *Service) Read(ctx context.Context, reader string, q Query) (Page, error) {
	limit := q.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	if limit < 1 || limit > MaxLimit {
		return Page{}, errInvalidLimit
	}
	st := s.cfg.Strategy
	if q.Strategy != "" {
		var err error
		if st, err = ParseStrategy(q.Strategy, s.cfg.Threshold); err != nil {
			return Page{}, err
		}
	}
	pos := first(strategyCode(st.Name()))
	if q.Cursor != "" {
		var err error
		if pos, err = decodeCursor(s.cfg.CursorKey, reader, q.Cursor); err != nil {
			return Page{}, err
		}
		if q.Strategy == "" {
			var ok bool
			if st, ok = s.strategyOf(pos.Strategy); !ok {
				return Page{}, errInvalidCursor
			}
		} else if pos.Strategy != strategyCode(st.Name()) {
			return Page{}, fmt.Errorf("%w: it belongs to another strategy", errInvalidCursor)
		}
	}
	res, err := s.page(ctx, st, reader, pos, limit)
	if err != nil {
		return Page{}, err
	}
	if res.blocker != "" {
		return Page{}, fmt.Errorf("%w: the posts of %s, which it follows, were not pushed into inboxes; read with strategy=hybrid or pull",
			errStrategyUnavailable, res.blocker)
	}
	p := res.assemble(pos, q.Cursor == "", limit, s.cfg.CursorKey, reader)
	p.Strategy = st.Name()
	s.m.pages.WithLabelValues(p.Strategy).Inc()
	s.m.late.WithLabelValues(p.Strategy).Add(float64(p.Late))
	return p, nil
}

// pageRow is one row of the page statement (store.go, sqlPage).
type pageRow struct {
	post rel.Post
	seq  int64 // late arrivals only
}

// pageResult is the page statement's answer.
type pageResult struct {
	blocker  string
	seen     int64
	overflow bool
	late     []pageRow // by seq
	normal   []pageRow // newest first, up to limit + 1
}

// pageArgs are the page statement's parameters (see sqlPage's doc).
func pageArgs(st Strategy, reader string, pos position, limit int) pgx.NamedArgs {
	return pgx.NamedArgs{
		"reader": reader, "cursor_at": pos.At, "cursor_id": pos.ID, "top_at": pos.TopAt, "top_id": pos.TopID,
		"seen": pos.Seen, "limit": limit, "strategy": st.Name(),
	}
}

func (s *Service) page(ctx context.Context, st Strategy, reader string, pos position, limit int) (pageResult, error) {
	args := pageArgs(st, reader, pos, limit)
	logged, plain := st.sql(true), st.sql(false)
	var (
		rows pgx.Rows
		err  error
	)
	if s.cfg.ResponseLog {
		// The log makes the read a write: commit it asynchronously, in
		// the same implicit transaction as the page (one batch).
		b := &pgx.Batch{}
		b.Queue(sqlAsyncCommit)
		b.Queue(logged.SQL, logged.Args(args)...)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return pageResult{}, fmt.Errorf("feed: read %s: %w", reader, pg.MapError(err))
		}
		rows, err = br.Query()
	} else {
		rows, err = s.pool.Query(ctx, plain.SQL, plain.Args(args)...)
	}
	if err != nil {
		return pageResult{}, fmt.Errorf("feed: read %s: %w", reader, pg.MapError(err))
	}
	defer rows.Close()
	var res pageResult
	for rows.Next() {
		var (
			part     int32
			rank     int64
			seq      *int64
			id       *int64
			author   *string
			vis      *string
			body     *string
			version  *int64
			created  *time.Time
			updated  *time.Time
			followV  *int64
			seen     *int64
			overflow *bool
		)
		if err := rows.Scan(&part, &rank, &seq, &id, &author, &vis, &body, &version, &created, &updated, &followV, &seen, &overflow); err != nil {
			return pageResult{}, fmt.Errorf("feed: read %s: %w", reader, pg.MapError(err))
		}
		if part == 0 {
			if author != nil {
				res.blocker = *author
			}
			res.seen, res.overflow = *seen, *overflow
			continue
		}
		r := pageRow{post: rel.Post{PostID: *id, Author: *author, Visibility: rel.Visibility(*vis), Body: *body,
			Version: *version, CreatedAt: *created, UpdatedAt: *updated}}
		if part == 1 {
			r.seq = *seq
			res.late = append(res.late, r)
		} else {
			res.normal = append(res.normal, r)
		}
	}
	if err := rows.Err(); err != nil {
		return pageResult{}, fmt.Errorf("feed: read %s: %w", reader, pg.MapError(err))
	}
	slices.SortFunc(res.late, func(a, b pageRow) int { return cmp.Compare(a.seq, b.seq) })
	slices.SortFunc(res.normal, func(a, b pageRow) int { return newestFirst(a.post, b.post) })
	return res, nil
}

// assemble cuts the page and its cursor. Without overflow: the late
// arrivals, then up to limit posts before the cursor; the next page starts
// after the last of them, and remembers this page's watermark. With
// overflow (more than limit late arrivals, say after the consumer was
// down): the limit earliest-settled late arrivals only; the next page
// stays at the same position with the watermark moved to the last of
// them, so the remaining late arrivals and the page before the cursor
// follow, each post exactly once.
func (r pageResult) assemble(pos position, firstPage bool, limit int, key []byte, reader string) Page {
	p := Page{Posts: []rel.Post{}}
	next := pos
	if r.overflow {
		late := r.late[:limit]
		for _, row := range late {
			p.Posts = append(p.Posts, row.post)
		}
		slices.SortFunc(p.Posts, newestFirst)
		p.Late = len(late)
		next.Seen = late[len(late)-1].seq
		p.Next = next.encode(key, reader)
		return p
	}
	for _, row := range r.late {
		p.Posts = append(p.Posts, row.post)
	}
	slices.SortFunc(p.Posts, newestFirst)
	p.Late = len(p.Posts)
	for i, row := range r.normal {
		if i == limit {
			break
		}
		p.Posts = append(p.Posts, row.post)
	}
	if len(r.normal) > limit {
		last := r.normal[limit-1].post
		next.At, next.ID = last.CreatedAt, last.PostID
		if firstPage {
			next.TopAt, next.TopID = p.Posts[0].CreatedAt, p.Posts[0].PostID
		}
		next.Seen = r.seen
		p.Next = next.encode(key, reader)
	}
	return p
}

// newestFirst orders posts by (created_at, post_id) descending, the feed's
// keyset order.
func newestFirst(a, b rel.Post) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(b.PostID, a.PostID)
}

// Consumer is the fan-out consumer (social.post and social.rel).
func (s *Service) Consumer() outbox.Consumer {
	return outbox.Consumer{
		Name:        ConsumerName,
		Topics:      []string{rel.PostTopic, rel.Topic},
		HandleBatch: s.apply,
		BatchSize:   batchSize,
	}
}

// apply applies a batch of events in tx (the consumer's handler): it
// settles the posts created (sqlSettle) and backfills the follows that
// became active (sqlBackfill). Both read the truth as of their statement,
// which runs after every event's transaction committed, so a post and a
// follow committing concurrently meet in one of them: whichever is applied
// second sees the other (FEED-I2's completeness). Visibility changes and
// ended follows need nothing here: the read path re-checks the truth.
func (s *Service) apply(ctx context.Context, tx pgx.Tx, evs []outbox.Event) error {
	var (
		posts               []int64
		followers, followee []string
	)
	for _, ev := range evs {
		switch ev.Topic {
		case rel.PostTopic:
			var e rel.PostEvent
			if err := json.Unmarshal(ev.Payload, &e); err != nil || e.PostID < 1 || e.Version < 1 {
				// A malformed event is a bug upstream; stop here so the lag
				// shows it (REL-I4) rather than skip a post silently.
				return fmt.Errorf("feed: malformed post event %d: %s", ev.ID, ev.Payload)
			}
			if e.Version == 1 {
				posts = append(posts, e.PostID)
			}
		case rel.Topic:
			var e rel.RelEvent
			if err := json.Unmarshal(ev.Payload, &e); err != nil || e.Follower == "" || e.Followee == "" {
				return fmt.Errorf("feed: malformed relation event %d: %s", ev.ID, ev.Payload)
			}
			if e.State == rel.StateActive {
				followers, followee = append(followers, e.Follower), append(followee, e.Followee)
			}
		}
	}
	if len(posts) > 0 {
		if _, err := s.settle(ctx, tx, posts); err != nil {
			return err
		}
	}
	if len(followers) > 0 {
		if _, err := tx.Exec(ctx, sqlBackfill, followers, followee, s.cfg.BackfillPosts); err != nil {
			return fmt.Errorf("feed: backfill %d follows: %w", len(followers), pg.MapError(err))
		}
	}
	return nil
}

// settle settles posts with the configured strategy's decision.
func (s *Service) settle(ctx context.Context, tx pgx.Tx, posts []int64) ([]settledPost, error) {
	var below *int64
	if t := s.cfg.Strategy.pushesBelow(); t != always {
		below = &t
	}
	rows, err := tx.Query(ctx, sqlSettle, posts, below)
	if err != nil {
		return nil, fmt.Errorf("feed: settle %d posts: %w", len(posts), pg.MapError(err))
	}
	settled, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (settledPost, error) {
		var st settledPost
		err := r.Scan(&st.PostID, &st.Pushed, &st.CreatedAt, &st.InboxRows)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("feed: settle %d posts: %w", len(posts), pg.MapError(err))
	}
	now := time.Now()
	name := s.cfg.Strategy.Name()
	for _, st := range settled {
		s.m.fanout.WithLabelValues(name).Observe(float64(st.InboxRows))
		s.m.settleDelay.Observe(max(now.Sub(st.CreatedAt), 0).Seconds())
	}
	return settled, nil
}

// pruneServed keeps the newest ResponseLogRows rows of the response log.
func (s *Service) pruneServed(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, sqlPruneServed, s.cfg.ResponseLogRows)
	if err != nil {
		return 0, fmt.Errorf("feed: prune the response log: %w", pg.MapError(err))
	}
	return tag.RowsAffected(), nil
}

// purgeBatch bounds one inbox retention statement.
const purgeBatch = 1000

// purgeKindName is the periodic kind that enforces InboxRetention.
const purgeKindName = "feed.purge"

// PurgeInbox deletes inbox rows of posts older than retention, in batches,
// raising the horizon FEED-I2 judges from; it returns the rows deleted.
func PurgeInbox(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	var total int64
	for {
		var n int64
		if err := db.QueryRow(ctx, sqlPurgeInbox, retention.Microseconds(), purgeBatch).Scan(&n); err != nil {
			return total, fmt.Errorf("feed: purge the inbox: %w", pg.MapError(err))
		}
		total += n
		if n < purgeBatch {
			return total, nil
		}
	}
}

// purgeKind is feed.purge: one run per slot across all processes.
func (s *Service) purgeKind() claim.Kind {
	return claim.RetentionKind(purgeKindName, s.cfg.InboxRetention, func(ctx context.Context) (any, error) {
		n, err := PurgeInbox(ctx, s.pool, s.cfg.InboxRetention)
		return claim.Deleted(n), err
	})
}

// GrowthProbes are the feed's periodic queries whose cost must not grow
// with the history (plan tests, bench growth).
func GrowthProbes(retention time.Duration) []pg.Probe {
	return []pg.Probe{
		{Name: "feed.purge inbox batch", When: pg.Periodic, SQL: sqlPurgeInbox,
			Args: []any{retention.Microseconds(), purgeBatch}, Bound: pg.Batch(purgeBatch)},
	}
}
