package like

// All of like's SQL (invariants.go holds the invariant checks; the
// migration holds social_like_unapplied, the definition of "not yet
// counted" that the read path and the invariants share).
const (
	// sqlLike makes the fact liked: version 1 for a first like, + 1 for a
	// like after an unlike, nothing when it is liked already (a repeated
	// click). One statement: ON CONFLICT locks the row and evaluates the
	// WHERE on its latest version, so racing clicks serialise on the row
	// and exactly one of them changes it (LIKE-I1). This is the like's
	// first write, so its transaction takes its xid here.
	sqlLike = `
INSERT INTO social_like AS f (item_id, user_id) VALUES ($1, $2)
ON CONFLICT (item_id, user_id) DO UPDATE
   SET liked = true, version = f.version + 1, changed_tx = pg_current_xact_id(), updated_at = now()
 WHERE NOT f.liked
RETURNING liked, version, updated_at`

	// sqlUnlike is the reverse; a user who never liked the item has no row
	// and changes nothing. An UPDATE that waited for the row lock re-checks
	// its WHERE on the version the other click left.
	sqlUnlike = `
UPDATE social_like SET liked = false, version = version + 1, changed_tx = pg_current_xact_id(), updated_at = now()
 WHERE item_id = $1 AND user_id = $2 AND liked
RETURNING liked, version, updated_at`

	sqlFact = `SELECT liked, version, updated_at FROM social_like WHERE item_id = $1 AND user_id = $2`

	// sqlLikes reads an item's count, its unapplied events and the caller's
	// fact in one statement: one snapshot, so the bound is the bound of
	// this count (LIKE-I4). The post's existence and AccessCheck come with
	// it. A count below zero (an unlike applied before its like) is shown
	// as zero, which only brings it closer to the truth.
	sqlLikes = `
SELECT p.found, p.readable, greatest(coalesce(c.n, 0), 0), u.events,
       coalesce(extract(epoch FROM now() - u.oldest), 0)::float8, coalesce(f.liked, false)
  FROM (SELECT EXISTS (SELECT 1 FROM social_post WHERE post_id = $1) AS found,
               social_can_read($2, $1) AS readable) p
  LEFT JOIN social_like_count c ON c.item_id = $1
  LEFT JOIN social_like f ON f.item_id = $1 AND f.user_id = $2
 CROSS JOIN social_like_unapplied($1) u`

	// sqlDemoItem is the seed's item: the author's first public post.
	sqlDemoItem = `SELECT post_id FROM social_post WHERE author = $1 AND visibility = 'PUBLIC' ORDER BY post_id LIMIT 1`

	sqlItemExists = `SELECT EXISTS (SELECT 1 FROM social_post WHERE post_id = $1)`

	// SQLApply is sqlApply, exported for the lab's naive counter
	// (likes/redelivery-counted-once): the product's batch statement run
	// without the outbox's inbox, so a redelivered event is added again.
	// The product never runs it outside outbox.Runner (LIKE-I3).
	SQLApply = sqlApply

	// sqlApply is the counter's batch: one +1/-1 per event, summed per
	// item, in the batch's transaction (which also writes the inbox rows
	// and the position: a redelivered event never gets here). An event
	// whose transaction is visible in the item's counted_through was
	// counted by the last recompute and is skipped; every other one is
	// added (LIKE-04). The recompute holds batches off while it writes
	// (outbox.LockPosition), so the counted_through read here is final.
	// Returns how many events were added.
	sqlApply = `
WITH ev AS (
    SELECT e.item_id, e.tx::xid8 AS tx_id, e.delta
      FROM unnest($1::bigint[], $2::text[], $3::int[]) AS e(item_id, tx, delta)
), fresh AS (
    SELECT ev.item_id, ev.delta
      FROM ev LEFT JOIN social_like_count c USING (item_id)
     WHERE c.counted_through IS NULL OR NOT pg_visible_in_snapshot(ev.tx_id, c.counted_through)
), d AS (
    SELECT item_id, sum(delta) AS d FROM fresh GROUP BY item_id HAVING sum(delta) <> 0
), up AS (
    INSERT INTO social_like_count AS c (item_id, n) SELECT item_id, d FROM d
    ON CONFLICT (item_id) DO UPDATE SET n = c.n + excluded.n, updated_at = now()
)
SELECT count(*) FROM fresh`

	// sqlRecount recounts the next chunk of items after $1 (or only item
	// $3) from the facts and records the snapshot it counted in:
	// pg_current_snapshot() is this statement's snapshot, the one the
	// counts were read in, so an event was counted exactly when its
	// transaction is visible in it. Run under outbox.LockPosition. It
	// returns per item the count before and after, the events the recount
	// took in before the consumer applied them (it will skip them), and
	// the drift: before + their +1/-1 - after, zero unless the stored
	// count was wrong. Every CTE reads the statement's one snapshot, so
	// social_like_unapplied sees the previous watermark.
	sqlRecount = `
WITH items AS (
    SELECT item_id FROM (
        (SELECT DISTINCT item_id FROM social_like
          WHERE item_id > $1 AND ($3::bigint IS NULL OR item_id = $3) ORDER BY item_id LIMIT $2)
        UNION
        (SELECT item_id FROM social_like_count
          WHERE item_id > $1 AND ($3::bigint IS NULL OR item_id = $3) ORDER BY item_id LIMIT $2)) i
     ORDER BY item_id LIMIT $2
), recount AS (
    SELECT i.item_id, coalesce(c.n, 0) AS before, u.events AS ahead, u.delta AS ahead_delta,
           (SELECT count(*) FROM social_like f WHERE f.item_id = i.item_id AND f.liked) AS after
      FROM items i
      LEFT JOIN social_like_count c USING (item_id)
     CROSS JOIN LATERAL social_like_unapplied(i.item_id) u
), up AS (
    INSERT INTO social_like_count AS c (item_id, n, counted_through, recomputed_at, updated_at)
    SELECT item_id, after, pg_current_snapshot(), now(), now() FROM recount
    ON CONFLICT (item_id) DO UPDATE
       SET n = excluded.n, counted_through = excluded.counted_through,
           recomputed_at = excluded.recomputed_at, updated_at = excluded.updated_at
)
SELECT item_id, before, after, ahead, before + ahead_delta - after FROM recount ORDER BY item_id`
)
