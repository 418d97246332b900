package rel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
)

// Bulk loading of generated graphs (the feed's `fencelab seed feed` and its
// benchmark). rel's tables are written only by rel — by its service and by
// these functions — so the truth table, its versions and its events keep
// one writer (docs/DATA.md). Every function runs inside the caller's
// transaction.

// LoadRelation is one version of one truth-table row: loading a private
// account's approved follow takes two (pending, then active).
type LoadRelation struct {
	Follower, Followee string
	State              State
	Version            int64
	Op                 Op
}

// LoadPost is one generated post.
type LoadPost struct {
	Author     string
	Visibility Visibility
	Body       string
	CreatedAt  time.Time
}

// AnyUserExists returns one of ids that already has a user row, if any.
func AnyUserExists(ctx context.Context, q pg.Querier, ids []string) (string, bool, error) {
	var taken string
	err := q.QueryRow(ctx, sqlAnyUserExists, ids).Scan(&taken)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("social: look for loaded users: %w", pg.MapError(err))
	}
	return taken, true, nil
}

// LoadUsers creates users (ids[i] private when private[i]), created at at.
func LoadUsers(ctx context.Context, tx pgx.Tx, ids []string, private []bool, at time.Time) error {
	if _, err := tx.Exec(ctx, sqlLoadUsers, ids, private, at); err != nil {
		return fmt.Errorf("social: load users: %w", pg.MapError(err))
	}
	return nil
}

// loadRelationsStmt is sqlLoadRelations rewritten to $n once (pg.MustNamed).
var loadRelationsStmt = pg.MustNamed(sqlLoadRelations)

// LoadRelations appends one social.rel event per version, in order, and
// writes each row at its last version with that event's id and this
// transaction as changed_tx (REL-I1). A pair's versions must all be in one
// call, in version order.
func LoadRelations(ctx context.Context, tx pgx.Tx, rs []LoadRelation, at time.Time) error {
	if len(rs) == 0 {
		return nil
	}
	msgs := make([]outbox.Message, len(rs))
	for i, r := range rs {
		msgs[i] = outbox.Message{Topic: Topic, Key: r.Followee,
			Payload: RelEvent{Follower: r.Follower, Followee: r.Followee, State: r.State, Version: r.Version, Op: r.Op}}
	}
	ids, err := outbox.AppendMany(ctx, tx, msgs)
	if err != nil {
		return fmt.Errorf("social: load relations: %w", err)
	}
	f, e, state := make([]string, len(rs)), make([]string, len(rs)), make([]string, len(rs))
	version := make([]int64, len(rs))
	for i, r := range rs {
		f[i], e[i], state[i], version[i] = r.Follower, r.Followee, string(r.State), r.Version
	}
	if _, err := tx.Exec(ctx, loadRelationsStmt.SQL, loadRelationsStmt.Args(pgx.NamedArgs{
		"follower": f, "followee": e, "state": state, "version": version, "event_id": ids, "at": at,
	})...); err != nil {
		return fmt.Errorf("social: load relations: %w", pg.MapError(err))
	}
	return nil
}

// LoadPosts writes posts and their social.post creation events, in order.
func LoadPosts(ctx context.Context, tx pgx.Tx, ps []LoadPost) error {
	if len(ps) == 0 {
		return nil
	}
	author, vis, body := make([]string, len(ps)), make([]string, len(ps)), make([]string, len(ps))
	at := make([]time.Time, len(ps))
	for i, p := range ps {
		author[i], vis[i], body[i], at[i] = p.Author, string(p.Visibility), p.Body, p.CreatedAt
	}
	rows, err := tx.Query(ctx, sqlLoadPosts, author, vis, body, at)
	if err != nil {
		return fmt.Errorf("social: load posts: %w", pg.MapError(err))
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PostEvent, error) {
		var ev PostEvent
		err := r.Scan(&ev.PostID, &ev.Author, &ev.Visibility, &ev.Version, &ev.CreatedAt)
		return ev, err
	})
	if err != nil {
		return fmt.Errorf("social: load posts: %w", pg.MapError(err))
	}
	// Events in post order, as the posts were written.
	slices.SortFunc(events, func(a, b PostEvent) int { return cmp.Compare(a.PostID, b.PostID) })
	msgs := make([]outbox.Message, len(events))
	for i, ev := range events {
		msgs[i] = outbox.Message{Topic: PostTopic, Key: ev.Author, Payload: ev}
	}
	if _, err := outbox.AppendMany(ctx, tx, msgs); err != nil {
		return fmt.Errorf("social: load posts: %w", err)
	}
	return nil
}
