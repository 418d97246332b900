package rel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
)

// Fault points of a relation operation (key: "actor>other").
const (
	// PointLocked: both rows of the pair are locked, nothing written yet.
	// A second operation on the pair waits here for the lock (REL-01).
	PointLocked = "social.rel.locked"
	// PointBeforeCommit: the rows and their events are written, not
	// committed. Reads still see the old state (REL-03).
	PointBeforeCommit = "social.rel.before_commit"
)

// Limits of the API.
const (
	MaxBody      = 4000 // characters of a post
	defaultLimit = 50
	maxLimit     = 200
)

// Service is the RelationService: the six operations on the truth table,
// posts, and AccessCheck. feed and like reuse it. It is safe for
// concurrent use.
type Service struct {
	pool   *pgxpool.Pool
	faults *faults.Set
	log    *slog.Logger
	m      *metrics
}

// NewService builds the service from the shared dependencies (rel has no
// settings).
func NewService(d app.Deps) (*Service, error) {
	return &Service{pool: d.Pool, faults: d.Faults, log: d.Logger(), m: newMetrics(d.Registerer())}, nil
}

func validUser(id string) error {
	if !httpx.ValidSubject(id) {
		return ErrInvalidUser
	}
	return nil
}

// Do runs op by actor on other in its own transaction.
func (s *Service) Do(ctx context.Context, op Op, actor, other string) (Result, error) {
	var res Result
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.doTx(ctx, tx, op, actor, other)
		return err
	})
	return res, err
}

// transition is one row's change decided under the pair's lock.
type transition struct {
	row Relation
	to  State
}

// doTx runs op by actor on other inside tx: it locks both rows of the
// pair, decides, and writes each changed row with its version + 1 and one
// social.rel event carrying that version (REL-I1). It returns the row the
// operation is about: (actor, other) for follow, unfollow, block and
// unblock; (other, actor) — the request — for approve and reject.
func (s *Service) doTx(ctx context.Context, tx pgx.Tx, op Op, actor, other string) (Result, error) {
	if err := validUser(actor); err != nil {
		return Result{}, err
	}
	if err := validUser(other); err != nil {
		return Result{}, err
	}
	if actor == other {
		return Result{}, ErrSelf
	}
	if err := ensureUser(ctx, tx, actor); err != nil {
		return Result{}, err
	}
	target, err := getUser(ctx, tx, other)
	if err != nil {
		return Result{}, err
	}
	mine, theirs, err := lockPair(ctx, tx, actor, other)
	if err != nil {
		return Result{}, err
	}
	key := actor + ">" + other
	if err := s.faults.Hit(ctx, PointLocked, key); err != nil {
		return Result{}, err
	}
	plan, subject, err := decide(op, mine, theirs, target.Private)
	if err != nil {
		return Result{}, err
	}
	res := Result{Relation: subject}
	for _, t := range plan {
		after, err := write(ctx, tx, op, t)
		if err != nil {
			return Result{}, err
		}
		if after.Follower == subject.Follower {
			res.Relation = after
		}
		res.Changed = true
		s.m.changes.WithLabelValues(string(op)).Inc()
	}
	if err := s.faults.Hit(ctx, PointBeforeCommit, key); err != nil {
		return Result{}, err
	}
	return res, nil
}

// decide is the state machine. mine is (actor, other), theirs (other,
// actor); private is other's flag. It returns the transitions and the row
// the operation is about.
func decide(op Op, mine, theirs Relation, private bool) ([]transition, Relation, error) {
	var plan []transition
	switch op {
	case OpFollow:
		switch {
		case theirs.State == StateBlocked:
			return nil, mine, ErrBlocked
		case mine.State == StateBlocked:
			return nil, mine, ErrYouBlock
		case mine.State == StateActive || mine.State == StatePending:
			// Already following or asked: a repeated click changes nothing.
		case private:
			plan = append(plan, transition{mine, StatePending})
		default:
			plan = append(plan, transition{mine, StateActive})
		}
		return plan, mine, nil
	case OpUnfollow:
		if mine.State == StateActive || mine.State == StatePending {
			plan = append(plan, transition{mine, StateNone})
		}
		return plan, mine, nil
	case OpApprove, OpReject:
		// The request is theirs: (other, actor).
		if theirs.State != StatePending {
			return nil, theirs, ErrNotPending
		}
		to := StateActive
		if op == OpReject {
			to = StateNone
		}
		return []transition{{theirs, to}}, theirs, nil
	case OpBlock:
		// REL-I2: the block and the end of both follows commit together.
		if mine.State != StateBlocked {
			plan = append(plan, transition{mine, StateBlocked})
		}
		if theirs.State == StateActive || theirs.State == StatePending {
			plan = append(plan, transition{theirs, StateNone})
		}
		return plan, mine, nil
	case OpUnblock:
		if mine.State == StateBlocked {
			plan = append(plan, transition{mine, StateNone})
		}
		return plan, mine, nil
	}
	return nil, mine, fmt.Errorf("social: unknown operation %q", op)
}

// changeStmt is sqlChange rewritten to $n once (pg.MustNamed).
var changeStmt = pg.MustNamed(sqlChange)

// write applies one transition: the event first (its id goes into the
// row), then the conditional update. Both are in the caller's transaction,
// so the event exists exactly when the change commits (REL-I1).
func write(ctx context.Context, tx pgx.Tx, op Op, t transition) (Relation, error) {
	r := t.row
	version := r.Version + 1
	id, err := outbox.Append(ctx, tx, Topic, r.Followee, RelEvent{
		Follower: r.Follower, Followee: r.Followee, State: t.to, Version: version, Op: op,
	})
	if err != nil {
		return Relation{}, err
	}
	after := Relation{Follower: r.Follower, Followee: r.Followee, State: t.to}
	err = tx.QueryRow(ctx, changeStmt.SQL, changeStmt.Args(pgx.NamedArgs{
		"follower":     r.Follower,
		"followee":     r.Followee,
		"from_state":   r.State,
		"from_version": r.Version,
		"to_state":     t.to,
		"event_id":     id,
	})...).Scan(&after.Version, &after.UpdatedAt)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return Relation{}, errRaced
	}
	if err != nil {
		return Relation{}, fmt.Errorf("social: change %s>%s: %w", r.Follower, r.Followee, pg.MapError(err))
	}
	return after, nil
}

// Relations returns the pair's two rows: (a, b) and (b, a). A user who has
// never used the service is errUserNotFound, as follow answers it: "no
// relation" is an answer about two users who both exist.
func (s *Service) Relations(ctx context.Context, a, b string) (ab, ba Relation, err error) {
	if err := validUser(b); err != nil {
		return ab, ba, err
	}
	if _, err := getUser(ctx, s.pool, b); err != nil {
		return ab, ba, err
	}
	if ab, err = getRelation(ctx, s.pool, a, b); err != nil {
		return ab, ba, err
	}
	ba, err = getRelation(ctx, s.pool, b, a)
	return ab, ba, err
}

// SetProfile creates or updates the user's profile.
func (s *Service) SetProfile(ctx context.Context, user string, private bool) (User, error) {
	if err := validUser(user); err != nil {
		return User{}, err
	}
	var u User
	err := s.pool.QueryRow(ctx, sqlUpsertProfile, user, private).Scan(&u.UserID, &u.Private, &u.CreatedAt)
	if err != nil {
		return User{}, fmt.Errorf("social: set profile %s: %w", user, pg.MapError(err))
	}
	return u, nil
}

// profile reads a user's profile.
func (s *Service) profile(ctx context.Context, user string) (User, error) {
	if err := validUser(user); err != nil {
		return User{}, err
	}
	return getUser(ctx, s.pool, user)
}

// requestsPage lists the pending requests to owner (truth table).
func (s *Service) requestsPage(ctx context.Context, owner, after string, limit int) (Page, error) {
	limit, err := checkLimit(limit)
	if err != nil {
		return Page{}, err
	}
	if err := checkAfter(after); err != nil {
		return Page{}, err
	}
	ids, err := userIDs(ctx, s.pool, sqlRequests, owner, after, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("social: requests of %s: %w", owner, err)
	}
	return pageOf(ids, limit), nil
}

// checkAfter validates a list cursor: "" or a user id.
func checkAfter(after string) error {
	if after == "" {
		return nil
	}
	return validUser(after)
}

func checkLimit(limit int) (int, error) {
	if limit == 0 {
		return defaultLimit, nil
	}
	if limit < 1 || limit > maxLimit {
		return 0, errInvalidLimit
	}
	return limit, nil
}

// pageOf cuts ids (read with limit + 1) to a page and its cursor.
func pageOf(ids []string, limit int) Page {
	p := Page{Users: ids}
	if len(ids) > limit {
		p.Users = ids[:limit]
		p.Next = ids[limit-1]
	}
	return p
}

// CreatePost publishes a post in its own transaction.
func (s *Service) CreatePost(ctx context.Context, author string, req PostRequest) (Post, error) {
	var p Post
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		p, err = s.CreatePostTx(ctx, tx, author, req)
		return err
	})
	return p, err
}

// CreatePostTx publishes a post inside tx: the row and its social.post
// event commit together (the feed fans out from that event).
func (s *Service) CreatePostTx(ctx context.Context, tx pgx.Tx, author string, req PostRequest) (Post, error) {
	if err := validUser(author); err != nil {
		return Post{}, err
	}
	if !req.Visibility.valid() {
		return Post{}, errInvalidVisibility
	}
	if n := utf8.RuneCountInString(req.Body); n < 1 || n > MaxBody || !utf8.ValidString(req.Body) {
		return Post{}, errInvalidBody
	}
	if err := ensureUser(ctx, tx, author); err != nil {
		return Post{}, err
	}
	p, err := scanPost(tx.QueryRow(ctx, sqlCreatePost, author, req.Visibility, req.Body))
	if err != nil {
		return Post{}, fmt.Errorf("social: create post: %w", pg.MapError(err))
	}
	if err := appendPostEvent(ctx, tx, p); err != nil {
		return Post{}, err
	}
	return p, nil
}

func appendPostEvent(ctx context.Context, tx pgx.Tx, p Post) error {
	_, err := outbox.Append(ctx, tx, PostTopic, p.Author, PostEvent{
		PostID: p.PostID, Author: p.Author, Visibility: p.Visibility, Version: p.Version, CreatedAt: p.CreatedAt,
	})
	return err
}

// SetVisibility changes a post's visibility (author only). The change
// takes effect for every read that starts after it commits: reads decide
// on the post row and the truth table, never on a copy.
func (s *Service) SetVisibility(ctx context.Context, actor string, postID int64, v Visibility) (Post, error) {
	if !v.valid() {
		return Post{}, errInvalidVisibility
	}
	var p Post
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		p, err = scanPost(tx.QueryRow(ctx, sqlLockPost, postID))
		if errors.Is(pg.MapError(err), pg.ErrNotFound) {
			return ErrPostNotFound
		}
		if err != nil {
			return fmt.Errorf("social: lock post %d: %w", postID, pg.MapError(err))
		}
		if p.Author != actor {
			// Someone who may not even read it learns nothing more.
			if ok, err := AccessCheck(ctx, tx, actor, postID); err != nil {
				return err
			} else if !ok {
				return ErrForbidden
			}
			return errNotAuthor
		}
		if p.Visibility == v {
			return nil
		}
		p, err = scanPost(tx.QueryRow(ctx, sqlSetVisibility, postID, p.Version, v))
		if err != nil {
			return fmt.Errorf("social: set visibility of %d: %w", postID, pg.MapError(err))
		}
		return appendPostEvent(ctx, tx, p)
	})
	return p, err
}

// readPost returns the post if viewer may read it now: ErrPostNotFound,
// or ErrForbidden when AccessCheck refuses.
func (s *Service) readPost(ctx context.Context, viewer string, postID int64) (Post, error) {
	var ok bool
	p, err := scanPost(s.pool.QueryRow(ctx, sqlReadPost, viewer, postID), &ok)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return Post{}, ErrPostNotFound
	}
	if err != nil {
		return Post{}, fmt.Errorf("social: read post %d: %w", postID, pg.MapError(err))
	}
	s.m.checked(ok)
	if !ok {
		return Post{}, ErrForbidden
	}
	return p, nil
}

// timelinePage is author's posts that viewer may read, newest first.
func (s *Service) timelinePage(ctx context.Context, viewer, author, cursor string, limit int) (PostPage, error) {
	if err := validUser(author); err != nil {
		return PostPage{}, err
	}
	limit, err := checkLimit(limit)
	if err != nil {
		return PostPage{}, err
	}
	c, ok, err := DecodeCursor(cursor)
	if err != nil {
		return PostPage{}, err
	}
	if !ok {
		c = noCursor
	}
	rows, err := s.pool.Query(ctx, sqlTimeline, viewer, author, c.CreatedAt, c.PostID, limit+1)
	if err != nil {
		return PostPage{}, fmt.Errorf("social: timeline of %s: %w", author, pg.MapError(err))
	}
	posts, err := collectPosts(rows)
	if err != nil {
		return PostPage{}, fmt.Errorf("social: timeline of %s: %w", author, pg.MapError(err))
	}
	page := PostPage{Posts: posts}
	if page.Posts == nil {
		page.Posts = []Post{}
	}
	if len(posts) > limit {
		last := posts[limit-1]
		page.Posts, page.Next = posts[:limit], postCursor{CreatedAt: last.CreatedAt, PostID: last.PostID}.encode()
	}
	return page, nil
}
