package rel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// All of rel's SQL (invariants.go holds the invariant checks; the
// migration holds the AccessCheck functions social_readable_posts,
// social_can_read, social_blocked and social_can_see_lists).
const (
	// sqlEnsureUser creates the acting user's row on first use.
	sqlEnsureUser = `INSERT INTO social_user (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING`

	sqlUpsertProfile = `
INSERT INTO social_user (user_id, private) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET private = excluded.private, updated_at = now()
RETURNING user_id, private, created_at`

	sqlGetUser = `SELECT user_id, private, created_at FROM social_user WHERE user_id = $1`

	// Bulk loading (load.go).
	sqlAnyUserExists = `SELECT user_id FROM social_user WHERE user_id = ANY ($1::text[]) LIMIT 1`

	sqlLoadUsers = `
INSERT INTO social_user (user_id, private, created_at, updated_at)
SELECT u.id, u.private, $3::timestamptz, $3::timestamptz
  FROM unnest($1::text[], $2::boolean[]) AS u(id, private)`

	// sqlLoadRelations writes each pair at its last version, with that
	// version's event (appended by LoadRelations through the outbox).
	sqlLoadRelations = `
INSERT INTO social_relation (follower, followee, state, version, event_id, changed_tx, updated_at)
SELECT DISTINCT ON (r.follower, r.followee)
       r.follower, r.followee, r.state, r.version, r.event_id, pg_current_xact_id(), @at::timestamptz
  FROM unnest(@follower::text[], @followee::text[], @state::text[], @version::bigint[], @event_id::bigint[])
       AS r(follower, followee, state, version, event_id)
 ORDER BY r.follower, r.followee, r.version DESC`

	// sqlLoadPosts writes posts in array order and returns what their
	// creation events carry.
	sqlLoadPosts = `
INSERT INTO social_post (author, visibility, body, created_at, updated_at)
SELECT e.author, e.visibility, e.body, e.created_at, e.created_at
  FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) WITH ORDINALITY AS e(author, visibility, body, created_at, n)
 ORDER BY e.n
RETURNING post_id, author, visibility, version, created_at`

	// sqlCreatePair makes sure both rows of the pair exist, inserting them
	// in key order: two transactions creating one pair insert in the same
	// order, so the second waits for the first instead of deadlocking, and
	// the primary key leaves one row per pair (REL-I1).
	sqlCreatePair = `
INSERT INTO social_relation (follower, followee)
SELECT a, b FROM (VALUES ($1::text, $2::text), ($2, $1)) AS pair(a, b)
 ORDER BY a, b
ON CONFLICT (follower, followee) DO NOTHING`

	// sqlLockPair locks both rows of the pair, in key order (the LockRows
	// step runs above the sort), so every operation on a pair — whichever
	// direction — serialises on the same two locks in the same order.
	sqlLockPair = `
SELECT follower, followee, state, version, updated_at
  FROM social_relation
 WHERE (follower, followee) IN (($1, $2), ($2, $1))
 ORDER BY follower, followee
   FOR UPDATE`

	// sqlChange is one transition: conditional on the state and version
	// read under the lock (the lock is the first line, this WHERE the
	// second; the guard trigger checks version + 1). It records the
	// change's event and transaction for REL-I1.
	sqlChange = `
UPDATE social_relation
   SET state = @to_state, version = version + 1, event_id = @event_id, changed_tx = pg_current_xact_id(), updated_at = now()
 WHERE follower = @follower AND followee = @followee AND state = @from_state AND version = @from_version
RETURNING version, updated_at`

	sqlRelation = `
SELECT follower, followee, state, version, updated_at
  FROM social_relation WHERE follower = $1 AND followee = $2`

	sqlRequests = `
SELECT follower FROM social_relation
 WHERE followee = $1 AND state = 'pending' AND follower > $2
 ORDER BY follower LIMIT $3`

	postColumns = `post_id, author, visibility, body, version, created_at, updated_at`

	sqlCreatePost = `
INSERT INTO social_post (author, visibility, body) VALUES ($1, $2, $3)
RETURNING ` + postColumns

	// sqlReadPost is AccessCheck with the post: the row and the truth
	// table's verdict in one snapshot.
	sqlReadPost = `
SELECT ` + postColumns + `, social_can_read($1, post_id) FROM social_post WHERE post_id = $2`

	sqlCanRead = `SELECT social_can_read($1, post_id) FROM social_post WHERE post_id = $2`

	sqlLockPost = `SELECT ` + postColumns + ` FROM social_post WHERE post_id = $1 FOR UPDATE`

	sqlSetVisibility = `
UPDATE social_post SET visibility = $3, version = version + 1, updated_at = now()
 WHERE post_id = $1 AND version = $2
RETURNING ` + postColumns

	// sqlTimeline is an author's posts that the viewer may read, newest
	// first, after the cursor: AccessCheck is the function in FROM.
	sqlTimeline = `
SELECT ` + postColumns + `
  FROM social_readable_posts($1) p
 WHERE p.author = $2 AND (p.created_at, p.post_id) < ($3, $4)
 ORDER BY p.created_at DESC, p.post_id DESC
 LIMIT $5`

	sqlCanSeeLists = `SELECT EXISTS (SELECT 1 FROM social_user WHERE user_id = $2), social_can_see_lists($1, $2)`

	sqlCounts = `
SELECT coalesce((SELECT n FROM social_follower_count WHERE user_id = $1), 0),
       coalesce((SELECT n FROM social_following_count WHERE user_id = $1), 0)`

	// sqlPendingForUser counts, per view, the relation events about the
	// user that the view's consumer has not applied: the user's counts
	// and lists are off by at most that many (REL-I4).
	sqlPendingForUser = `
SELECT v.name, count(e.id)
  FROM social_view v
  LEFT JOIN outbox_consumer c ON c.name = v.consumer
  LEFT JOIN outbox_event e
         ON e.topic = 'social.rel'
        AND (e.tx_id, e.id) > (coalesce(c.position_tx, '0'::xid8), coalesce(c.position_id, 0))
        AND e.payload->>(CASE v.name WHEN 'followers' THEN 'followee' ELSE 'follower' END) = $1
 WHERE v.name IN ('followers', 'following')
 GROUP BY v.name`

	// sqlViewLag is every declared view with its consumer's unapplied
	// events (up to outbox.LagCountCap per topic), the age on the database
	// clock of the first of them in read order, and the declared bound. A
	// consumer that has never run counts from the beginning. Each topic is
	// one range of outbox_event_topic_order from the position (run on
	// every /metrics scrape: it examines the lag, never the history).
	sqlViewLag = `
SELECT v.name, v.consumer, extract(epoch FROM v.max_lag)::float8,
       lag.events, coalesce(greatest(extract(epoch FROM now() - lag.oldest), 0), 0)::float8
  FROM social_view v
  LEFT JOIN outbox_consumer c ON c.name = v.consumer
 CROSS JOIN LATERAL (
       SELECT coalesce(sum(n.events), 0)::bigint AS events, min(f.created_at) AS oldest
         FROM (SELECT DISTINCT unnest(v.topics) AS topic) t
        CROSS JOIN LATERAL (
              SELECT count(*) AS events FROM (
                     SELECT 1 FROM outbox_event e
                      WHERE e.topic = t.topic
                        AND (e.tx_id, e.id) > (coalesce(c.position_tx, '0'::xid8), coalesce(c.position_id, 0))
                      ORDER BY e.tx_id, e.id
                      LIMIT 100000) l) n
         LEFT JOIN LATERAL (
              SELECT e.created_at FROM outbox_event e
               WHERE e.topic = t.topic
                 AND (e.tx_id, e.id) > (coalesce(c.position_tx, '0'::xid8), coalesce(c.position_id, 0))
               ORDER BY e.tx_id, e.id
               LIMIT 1) f ON true) lag
 ORDER BY v.name`
)

// viewSQL is the SQL of one derived view; %[1]s is its table, %[2]s its
// count table.
const (
	// sqlApplyView applies a batch of (user, peer, version, active) — at
	// most one per pair, the newest of the batch — in one statement.
	// REL-I3: a row changes only if the event's version is greater than
	// the one it holds; a tombstone (active = false) keeps its version,
	// so an old "active" arriving late, twice or after a reset to zero
	// matches nothing. The count moves by the active transitions the
	// upsert made: "old" is the statement's snapshot, taken before the
	// upsert. Batches of one consumer never overlap (the consumer row is
	// locked for the batch), which is what makes the delta exact. (The
	// count is an UPDATE, then an INSERT for new users: an upsert would
	// check n >= 0 on the proposed negative row before the conflict.)
	sqlApplyView = `
WITH ev AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[]) AS e(user_id, peer_id, version, active)
), old AS (
    SELECT v.user_id, v.peer_id, v.active FROM %[1]s v JOIN ev USING (user_id, peer_id)
), up AS (
    INSERT INTO %[1]s AS v (user_id, peer_id, version, active)
    SELECT user_id, peer_id, version, active FROM ev
    ON CONFLICT (user_id, peer_id) DO UPDATE
       SET version = excluded.version, active = excluded.active, applied_at = now()
     WHERE v.version < excluded.version
    RETURNING v.user_id, v.peer_id, v.active
), delta AS (
    SELECT up.user_id, sum(up.active::int - coalesce(old.active, false)::int) AS d
      FROM up LEFT JOIN old USING (user_id, peer_id)
     GROUP BY up.user_id
), bumped AS (
    UPDATE %[2]s c SET n = c.n + delta.d FROM delta
     WHERE c.user_id = delta.user_id AND delta.d <> 0
    RETURNING c.user_id
)
INSERT INTO %[2]s (user_id, n)
SELECT user_id, d FROM delta
 WHERE d <> 0 AND user_id NOT IN (SELECT user_id FROM bumped)`

	// sqlRebuildView writes the truth table into the view (%[3]s and
	// %[4]s: the truth columns of user_id and peer_id), through the same
	// version gate as the events: rows only move forward, so pending
	// events older than the snapshot are refused later and newer ones
	// still apply.
	sqlRebuildView = `
INSERT INTO %[1]s AS v (user_id, peer_id, version, active)
SELECT r.%[3]s, r.%[4]s, r.version, r.state = 'active' FROM social_relation r WHERE r.version > 0
ON CONFLICT (user_id, peer_id) DO UPDATE
   SET version = excluded.version, active = excluded.active, applied_at = now()
 WHERE v.version < excluded.version`

	sqlClearCounts = `DELETE FROM %[2]s`

	sqlRecount = `
INSERT INTO %[2]s (user_id, n)
SELECT user_id, count(*) FROM %[1]s WHERE active GROUP BY user_id`

	sqlViewPage = `
SELECT peer_id FROM %[1]s WHERE user_id = $1 AND active AND peer_id > $2 ORDER BY peer_id LIMIT $3`
)

// EnsureUser creates the user's row on first use, inside tx (a user exists
// once they act). Likes call it so that the author of a liked post can block
// the liker; social_user has this one writer.
func EnsureUser(ctx context.Context, tx pgx.Tx, id string) error { return ensureUser(ctx, tx, id) }

func ensureUser(ctx context.Context, tx pgx.Tx, id string) error {
	if _, err := tx.Exec(ctx, sqlEnsureUser, id); err != nil {
		return fmt.Errorf("social: create user %s: %w", id, pg.MapError(err))
	}
	return nil
}

func getUser(ctx context.Context, q pg.Querier, id string) (User, error) {
	var u User
	err := q.QueryRow(ctx, sqlGetUser, id).Scan(&u.UserID, &u.Private, &u.CreatedAt)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return User{}, errUserNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("social: read user %s: %w", id, pg.MapError(err))
	}
	return u, nil
}

// lockPair creates and locks the rows (a, b) and (b, a) and returns them
// in that order.
func lockPair(ctx context.Context, tx pgx.Tx, a, b string) (ab, ba Relation, err error) {
	if _, err := tx.Exec(ctx, sqlCreatePair, a, b); err != nil {
		return ab, ba, fmt.Errorf("social: create pair %s/%s: %w", a, b, pg.MapError(err))
	}
	rows, err := tx.Query(ctx, sqlLockPair, a, b)
	if err != nil {
		return ab, ba, fmt.Errorf("social: lock pair %s/%s: %w", a, b, pg.MapError(err))
	}
	rels, err := pgx.CollectRows(rows, scanRelation)
	if err != nil {
		return ab, ba, fmt.Errorf("social: lock pair %s/%s: %w", a, b, pg.MapError(err))
	}
	if len(rels) != 2 {
		return ab, ba, fmt.Errorf("social: lock pair %s/%s: %d rows", a, b, len(rels))
	}
	if rels[0].Follower == a {
		return rels[0], rels[1], nil
	}
	return rels[1], rels[0], nil
}

func scanRelation(row pgx.CollectableRow) (Relation, error) {
	var r Relation
	err := row.Scan(&r.Follower, &r.Followee, &r.State, &r.Version, &r.UpdatedAt)
	return r, err
}

// getRelation reads one row; a pair never touched reads as none, version 0.
func getRelation(ctx context.Context, q pg.Querier, follower, followee string) (Relation, error) {
	rows, err := q.Query(ctx, sqlRelation, follower, followee)
	if err != nil {
		return Relation{}, fmt.Errorf("social: read relation: %w", pg.MapError(err))
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRelation)
	if errors.Is(err, pgx.ErrNoRows) {
		return Relation{Follower: follower, Followee: followee, State: StateNone}, nil
	}
	if err != nil {
		return Relation{}, fmt.Errorf("social: read relation: %w", pg.MapError(err))
	}
	return r, nil
}

func scanPost(row pgx.Row, extra ...any) (Post, error) {
	var p Post
	dst := append([]any{&p.PostID, &p.Author, &p.Visibility, &p.Body, &p.Version, &p.CreatedAt, &p.UpdatedAt}, extra...)
	err := row.Scan(dst...)
	return p, err
}

func collectPosts(rows pgx.Rows) ([]Post, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Post, error) { return scanPost(r) })
}

func userIDs(ctx context.Context, q pg.Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, pg.MapError(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pg.MapError(err)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}

// AccessCheck reports whether viewer may read the post now, on the truth
// table (social_can_read); ErrPostNotFound when there is no such post.
// Every read path calls it or joins social_readable_posts. q may be the
// caller's transaction.
func AccessCheck(ctx context.Context, q pg.Querier, viewer string, postID int64) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, sqlCanRead, viewer, postID).Scan(&ok)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return false, ErrPostNotFound
	}
	if err != nil {
		return false, fmt.Errorf("social: access check: %w", pg.MapError(err))
	}
	return ok, nil
}

// noCursor sorts after every post: the first page.
var noCursor = postCursor{CreatedAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), PostID: 1<<63 - 1}

// GrowthProbes are rel's per-scrape and per-request lag queries for the
// plan tests and `fencelab bench growth`: each examines the views' lag,
// never the outbox's history.
func GrowthProbes(user string) []pg.Probe {
	return []pg.Probe{
		{Name: "social view lag", When: pg.PerScrape, SQL: sqlViewLag, Bound: pg.Live},
		{Name: "social pending for user", When: pg.PerRequest, SQL: sqlPendingForUser, Args: []any{user}, Bound: pg.Live},
	}
}
