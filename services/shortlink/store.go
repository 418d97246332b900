package shortlink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fencelab/fencelab/core/pg"
)

// invalidateChannel carries codes whose cached answers other replicas must
// forget (a revocation, or a creation that ends a cached "unknown").
const invalidateChannel = "shortlink_invalidate"

// All of the module's SQL (invariants.go holds the invariant checks).
const (
	// sqlCreate inserts a link and its creation record in one statement
	// and tells the other replicas. SL-I1: the primary key decides the race
	// for a code; ON CONFLICT DO NOTHING turns a lost race into zero rows —
	// the caller is told "taken" — and never into an overwrite. The
	// creation record exists exactly when a row comes back.
	sqlCreate = `
WITH link AS (
    INSERT INTO shortlink_links (code, target, owner, custom, expires_at)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (code) DO NOTHING
    RETURNING code, target, owner, custom, created_at, expires_at, revoked_at
), creation AS (
    INSERT INTO shortlink_creations (code, target, owner, created_at)
    SELECT code, target, owner, created_at FROM link
)
SELECT l.code, l.target, l.owner, l.custom, l.created_at, l.expires_at, l.revoked_at
FROM link l CROSS JOIN LATERAL (SELECT pg_notify('` + invalidateChannel + `', l.code)) AS notified`

	// sqlRevoke revokes a live link if the caller may (owner, or admin when
	// $3). The WHERE clause refuses a second revocation, so revoked_at is
	// never overwritten (the trigger is the first line). The notification
	// is delivered at commit; SL-I2's bound does not depend on it.
	sqlRevoke = `
WITH revoked AS (
    UPDATE shortlink_links SET revoked_at = now()
    WHERE code = $1 AND revoked_at IS NULL AND (owner = $2 OR $3)
    RETURNING code, target, owner, custom, created_at, expires_at, revoked_at
)
SELECT r.code, r.target, r.owner, r.custom, r.created_at, r.expires_at, r.revoked_at
FROM revoked r CROSS JOIN LATERAL (SELECT pg_notify('` + invalidateChannel + `', r.code)) AS notified`

	sqlGetLink = `
SELECT code, target, owner, custom, created_at, expires_at, revoked_at
FROM shortlink_links WHERE code = $1`

	// sqlLookup is the redirect path's only query (on a cache miss).
	sqlLookup = `SELECT target, expires_at, revoked_at IS NOT NULL, custom FROM shortlink_links WHERE code = $1`

	// sqlInsertClicks is a batch's first attempt: the clicks, and their
	// links' counters moved by the counts the writer made of the batch
	// ($4 codes, $5 clicks each), in one statement. The ids are the
	// batch's own, never sent before, so no row can conflict: a plain
	// INSERT stores all of them or none (a unique violation would fail
	// the whole statement), and the counts are exactly what it stored
	// (SL-I5). Half the database's work per click of sqlRetryClicks,
	// whose conflict check and RETURNING every click paid for before
	// (issue 25). Counters are upserted in code order, so two writers'
	// batches lock shared counters in one order (no deadlock).
	sqlInsertClicks = `
WITH ins AS (
    INSERT INTO shortlink_clicks (id, code, clicked_at)
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[])
)
INSERT INTO shortlink_click_count AS k (code, clicks)
SELECT * FROM unnest($4::text[], $5::bigint[]) AS n(code, clicks) ORDER BY code
ON CONFLICT (code) DO UPDATE SET clicks = k.clicks + EXCLUDED.clicks`

	// SQLInsertClicks is sqlInsertClicks, exported for the lab's naive
	// click writer (shortlink/click-batch-retried): a retry that runs the
	// first attempt's statement again, with no ON CONFLICT, stores a
	// committed batch twice. The product runs it on first attempts only
	// (SL-I4).
	SQLInsertClicks = sqlInsertClicks

	// sqlRetryClicks is every later attempt of a batch, whose earlier
	// attempt may have committed with its reply lost. SL-I4: it carries
	// the same ids, ON CONFLICT DO NOTHING inserts nothing already stored,
	// and only the rows it did insert (RETURNING yields no others) move
	// the counters (SL-I5).
	sqlRetryClicks = `
WITH ins AS (
    INSERT INTO shortlink_clicks (id, code, clicked_at)
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[])
    ON CONFLICT (id) DO NOTHING
    RETURNING code
)
INSERT INTO shortlink_click_count AS k (code, clicks)
SELECT code, count(*) FROM ins GROUP BY code ORDER BY code
ON CONFLICT (code) DO UPDATE SET clicks = k.clicks + EXCLUDED.clicks`

	// sqlInsertDrops records one flush of drop counts and adds them to the
	// counters; a retried flush carries the same flush_id and counts
	// nothing twice (SL-I4, SL-I5).
	sqlInsertDrops = `
WITH ins AS (
    INSERT INTO shortlink_click_drops (flush_id, code, dropped)
    SELECT $1, * FROM unnest($2::text[], $3::bigint[])
    ON CONFLICT (flush_id, code) DO NOTHING
    RETURNING code, dropped
)
INSERT INTO shortlink_click_count AS k (code, dropped)
SELECT code, sum(dropped) FROM ins GROUP BY code ORDER BY code
ON CONFLICT (code) DO UPDATE SET dropped = k.dropped + EXCLUDED.dropped`

	// sqlStats reads the link's counters: one primary-key lookup, whatever
	// the click history (the rows themselves age out, SL-I5).
	sqlStats = `
SELECT coalesce((SELECT clicks FROM shortlink_click_count WHERE code = $1), 0),
       coalesce((SELECT dropped FROM shortlink_click_count WHERE code = $1), 0)`

	// sqlPurgeClicks deletes up to $2 clicks older than $1 microseconds
	// (the cutoff on the database clock), oldest first from
	// shortlink_clicks_clicked_at, and moves them into the counters'
	// purged_clicks in the same statement (SL-I5 holds at every commit).
	sqlPurgeClicks = `
WITH doomed AS (
    SELECT id FROM shortlink_clicks
     WHERE clicked_at < now() - $1::bigint * interval '1 microsecond'
     ORDER BY clicked_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM shortlink_clicks WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING code
), counted AS (
    UPDATE shortlink_click_count k SET purged_clicks = k.purged_clicks + g.n
      FROM (SELECT code, count(*) AS n FROM gone GROUP BY code) g
     WHERE k.code = g.code
)
SELECT count(*) FROM gone`

	// sqlPurgeDrops is sqlPurgeClicks for the drop records.
	sqlPurgeDrops = `
WITH doomed AS (
    SELECT flush_id, code FROM shortlink_click_drops
     WHERE flushed_at < now() - $1::bigint * interval '1 microsecond'
     ORDER BY flushed_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM shortlink_click_drops x USING doomed d
     WHERE x.flush_id = d.flush_id AND x.code = d.code
    RETURNING x.code, x.dropped
), counted AS (
    UPDATE shortlink_click_count k SET purged_drops = k.purged_drops + g.n
      FROM (SELECT code, sum(dropped) AS n FROM gone GROUP BY code) g
     WHERE k.code = g.code
)
SELECT count(*) FROM gone`

	sqlListen = `LISTEN ` + invalidateChannel
)

func scanLink(row pgx.Row) (Link, error) {
	var l Link
	err := row.Scan(&l.Code, &l.Target, &l.Owner, &l.Custom, &l.CreatedAt, &l.ExpiresAt, &l.RevokedAt)
	return l, pg.MapError(err)
}

// createLink inserts the link; created is false when the code is taken.
func createLink(ctx context.Context, db pg.Querier, code, target, owner string, custom bool, expiresAt *time.Time) (l Link, created bool, err error) {
	l, err = scanLink(db.QueryRow(ctx, sqlCreate, code, target, owner, custom, expiresAt))
	switch {
	case errors.Is(err, pg.ErrNotFound):
		return Link{}, false, nil
	case pg.Constraint(err) == "shortlink_links_expiry_after_creation":
		// The service checked the expiry against its own clock; the
		// database's clock is ahead of it.
		return Link{}, false, fmt.Errorf("%w: expires_at is not after the creation time", errInvalidExpiry)
	}
	return l, err == nil, err
}

// revokeLink revokes code if it is live and the actor may; ok is false
// when nothing was revoked (unknown, not the actor's, or already revoked).
func revokeLink(ctx context.Context, db pg.Querier, code, actor string, admin bool) (l Link, ok bool, err error) {
	l, err = scanLink(db.QueryRow(ctx, sqlRevoke, code, actor, admin))
	if errors.Is(err, pg.ErrNotFound) {
		return Link{}, false, nil
	}
	return l, err == nil, err
}

func getLink(ctx context.Context, db pg.Querier, code string) (Link, error) {
	return scanLink(db.QueryRow(ctx, sqlGetLink, code))
}

// lookupRoute reads what the redirect path needs; found is false for an
// unknown code.
func lookupRoute(ctx context.Context, db pg.Querier, code string) (r route, found bool, err error) {
	var expires *time.Time
	err = pg.MapError(db.QueryRow(ctx, sqlLookup, code).Scan(&r.target, &expires, &r.revoked, &r.custom))
	switch {
	case errors.Is(err, pg.ErrNotFound):
		return route{}, false, nil
	case err != nil:
		return route{}, false, err
	}
	if expires != nil {
		r.expiresAt = *expires
	}
	return r, true, nil
}

// insertClicks writes the batch in rows: retry false for its first
// attempt, true for every later one (SL-I4).
func insertClicks(ctx context.Context, db pg.Querier, rows *clickRows, retry bool) error {
	var err error
	if retry {
		_, err = db.Exec(ctx, sqlRetryClicks, rows.ids, rows.codes, rows.ats)
	} else {
		_, err = db.Exec(ctx, sqlInsertClicks, rows.ids, rows.codes, rows.ats, rows.links, rows.counts)
	}
	return pg.MapError(err)
}

// clickRows are one batch's columns, the arrays of sqlInsertClicks.
// pgx hands every array element to its encoder as an interface value; a
// []uuid.UUID, []string or []time.Time copies each element to the heap on
// the way, and google/uuid even round-trips each id through its text form
// (and a failed binary plan's error). pgArray hands out pointers into its
// slice instead, to the pgtype values pgx encodes in binary directly, so a
// batch of any size costs a few allocations, not a dozen per click.
type clickRows struct {
	ids   pgArray[pgtype.UUID]
	codes pgArray[pgtype.Text]
	ats   pgArray[pgtype.Timestamptz]
	// links and counts: the batch's clicks per code, for the counters.
	links  pgArray[pgtype.Text]
	counts pgArray[pgtype.Int8]
	place  map[string]int // code → its index in links
}

// fill replaces the rows with batch. Every click's id is assigned here,
// before the first attempt, and kept by every retry (SL-I4): one UUIDv7
// per batch, its last two bytes replaced by the click's place in the batch
// (ClickBatch ≤ 10,000 < 2^16), so ids are unique and still time-ordered
// for the primary key's index.
func (r *clickRows) fill(batch []click) {
	base := uuid.Must(uuid.NewV7())
	r.ids, r.codes, r.ats = r.ids[:0], r.codes[:0], r.ats[:0]
	r.links, r.counts = r.links[:0], r.counts[:0]
	if r.place == nil {
		r.place = map[string]int{}
	}
	clear(r.place)
	for i, c := range batch {
		id := base
		binary.BigEndian.PutUint16(id[14:], uint16(i))
		// Truncated, not rounded, to the database's microseconds: the
		// stored instant stays before the expiry it was checked against.
		r.ids = append(r.ids, pgtype.UUID{Bytes: id, Valid: true})
		r.codes = append(r.codes, pgtype.Text{String: c.code, Valid: true})
		r.ats = append(r.ats, pgtype.Timestamptz{Time: c.at.Truncate(time.Microsecond), Valid: true})
		k, ok := r.place[c.code]
		if !ok {
			k = len(r.links)
			r.place[c.code] = k
			r.links = append(r.links, pgtype.Text{String: c.code, Valid: true})
			r.counts = append(r.counts, pgtype.Int8{Valid: true})
		}
		r.counts[k].Int64++
	}
}

// pgArray is a one-dimensional array parameter whose elements pgx reads
// through pointers (*pgtype.UUID is a UUIDValuer, *pgtype.Text a
// TextValuer, *pgtype.Timestamptz a TimestamptzValuer): boxing a pointer
// allocates nothing.
type pgArray[T any] []T

func (a pgArray[T]) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a pgArray[T]) Index(i int) any { return &a[i] }

func (a pgArray[T]) IndexType() any { return new(T) }

func insertDrops(ctx context.Context, db pg.Querier, flushID uuid.UUID, codes []string, counts []int64) error {
	_, err := db.Exec(ctx, sqlInsertDrops, flushID, codes, counts)
	return pg.MapError(err)
}

func readStats(ctx context.Context, db pg.Querier, code string) (Stats, error) {
	s := Stats{Code: code}
	err := db.QueryRow(ctx, sqlStats, code).Scan(&s.Clicks, &s.Dropped)
	return s, pg.MapError(err)
}

// PurgeBatch bounds one retention statement.
const PurgeBatch = 1000

// PurgeClicks deletes clicks and drop records older than retention, in
// batches, keeping the counters whole; it returns the rows deleted.
func PurgeClicks(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	var total int64
	for _, q := range []string{sqlPurgeClicks, sqlPurgeDrops} {
		for {
			var n int64
			if err := db.QueryRow(ctx, q, retention.Microseconds(), PurgeBatch).Scan(&n); err != nil {
				return total, fmt.Errorf("shortlink: purge clicks: %w", pg.MapError(err))
			}
			total += n
			if n < PurgeBatch {
				break
			}
		}
	}
	return total, nil
}

// GrowthProbes are the module's periodic and per-request queries whose
// cost must not grow with the click history (plan tests, bench growth).
func GrowthProbes(retention time.Duration, code string) []pg.Probe {
	return []pg.Probe{
		{Name: "shortlink.purge clicks batch", When: pg.Periodic, SQL: sqlPurgeClicks,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch)},
		{Name: "shortlink.purge drops batch", When: pg.Periodic, SQL: sqlPurgeDrops,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch)},
		{Name: "shortlink stats read", When: pg.PerRequest, SQL: sqlStats, Args: []any{code}, Bound: pg.Batch(1)},
	}
}
