package feed

import "github.com/fencelab/fencelab/core/pg"

// All of feed's SQL (invariants.go holds the invariant checks). The
// permission check is rel's social_readable_posts, inlined by the planner
// into each page statement; the follow is the truth table's row.

// postColumns are a page row's post, as rel.Post scans them.
const postColumns = `p.post_id, p.author, p.visibility, p.body, p.version, p.created_at, p.updated_at`

// sqlPage is one page in one statement, so that the candidates, the
// AccessCheck and follow re-check of each (FEED-I1), the settle watermark
// and the response log all see one snapshot. Parameters:
//
//	@reader reader   @cursor_at,@cursor_id cursor (created_at, post_id): the normal part is strictly before it
//	@top_at,@top_id top: the first post of the first page   @seen seen: the previous page's settle watermark
//	@limit limit    @strategy strategy name (response log)
//
// The first row (part 0) is the header: the author that makes the push
// strategy unavailable (if any), the settle watermark now, and whether the
// late arrivals overflow the page. Then the late arrivals (part 1, ranked
// by seq), settled after the previous page (seq > @seen) inside the range
// already scrolled ((cursor, top]); then, unless they overflow, the
// normal page (part 2): up to @limit + 1 posts before the cursor (one more
// than the page, to know whether there is a next one). Only rows ranked
// <= @limit are served and logged.
//
// A strategy's statement is pageHead + its "unavailable" probe + pageLate
// + its filter on late candidates (is the post in this strategy's source?)
// + pageNormal + its normal page + pageRest + the response-log CTE or
// nothing + pageTail: six fixed statements, put together from the fragments
// below once, when the package loads (no formatting per request).
const pageHead = `
WITH w AS (SELECT coalesce(max(seq), 0) AS seen FROM social_feed_post),
blocker AS (`

// readableNow is the re-check of one candidate post (the outer column
// postID) against the truth: readable by the reader now, and its author
// followed now (FEED-02), as c with the follow's version. It is a LATERAL
// subquery kept apart by OFFSET 0, so each candidate costs one social_post
// and one social_relation primary-key probe (see normalPush). The late
// arrivals and the push page use this one text, so they cannot disagree on
// what a reader may see.
func readableNow(postID string) string {
	return `
     CROSS JOIN LATERAL (
            SELECT ` + postColumns + `, f.version AS follow_version
              FROM social_readable_posts(@reader::text) p
              JOIN social_relation f ON f.follower = @reader::text AND f.followee = p.author AND f.state = 'active'
             WHERE p.post_id = ` + postID + `
            OFFSET 0) c`
}

// The late candidates are re-checked as normalPush's are (a LATERAL
// subquery kept apart by OFFSET 0): primary-key probes per candidate in
// seq order, never a join against every readable post of the followed
// authors.
var pageLate = `),
late AS (
    SELECT fp.seq, c.*
      FROM social_feed_post fp` + readableNow("fp.post_id") + `
     WHERE fp.seq > @seen::bigint
       AND (fp.created_at, fp.post_id) > (@cursor_at::timestamptz, @cursor_id::bigint)
       AND (fp.created_at, fp.post_id) <= (@top_at::timestamptz, @top_id::bigint)
       AND NOT EXISTS (SELECT 1 FROM blocker)`

const pageNormal = `
     ORDER BY fp.seq
     LIMIT @limit::int + 1),
overflow AS (SELECT count(*) > @limit::int AS yes FROM late),
normal AS (
    SELECT n.* FROM (`

const pageRest = `) n
     WHERE NOT (SELECT yes FROM overflow) AND NOT EXISTS (SELECT 1 FROM blocker)),
page AS (
    SELECT 1 AS part, row_number() OVER (ORDER BY seq) AS rank, seq,
           post_id, author, visibility, body, version, created_at, updated_at, follow_version
      FROM late
    UNION ALL
    SELECT 2, row_number() OVER (ORDER BY created_at DESC, post_id DESC), NULL::bigint,
           post_id, author, visibility, body, version, created_at, updated_at, follow_version
      FROM normal)`

const pageTail = `
SELECT 0 AS part, 0::bigint AS rank, NULL::bigint AS seq,
       NULL::bigint, (SELECT author FROM blocker), NULL::text, NULL::text, NULL::bigint,
       NULL::timestamptz, NULL::timestamptz, NULL::bigint, w.seen, (SELECT yes FROM overflow)
  FROM w
UNION ALL
SELECT part, rank, seq, post_id, author, visibility, body, version, created_at, updated_at, follow_version, NULL, NULL
  FROM page`

// sqlLogServed records what the page serves (FEED-I1's response log).
const sqlLogServed = `,
logged AS (
    INSERT INTO social_feed_served (reader, post_id, author, strategy, follow_version, post_version)
    SELECT @reader::text, post_id, author, @strategy::text, follow_version, version FROM page WHERE rank <= @limit::int)
`

// noBlocker: pull and hybrid can serve every reader. pushBlocker: the
// first followed author with a post that was not pushed; the inbox alone
// would miss that author's posts, so push refuses the reader.
const (
	noBlocker   = `SELECT NULL::text AS author WHERE false`
	pushBlocker = `
    SELECT a.author FROM social_feed_pull_author a
      JOIN social_relation f ON f.follower = @reader::text AND f.followee = a.author AND f.state = 'active'
     LIMIT 1`
)

// inboxHas is a late candidate's presence in the reader's inbox.
const inboxHas = `EXISTS (SELECT 1 FROM social_feed_inbox i
                        WHERE i.reader = @reader::text AND i.created_at = fp.created_at AND i.post_id = fp.post_id)`

// Late-candidate filters: where the strategy takes a post from.
const (
	lateFromInbox  = "\n       AND " + inboxHas
	lateFromAll    = ""
	lateFromHybrid = "\n       AND CASE WHEN fp.pushed THEN " + inboxHas + `
                ELSE EXISTS (SELECT 1 FROM social_feed_pull_author a WHERE a.author = fp.author) END`
)

// normalPush is the inbox, newest first (a backward scan of its primary
// key), each row re-checked against the truth: readable now, and the
// author followed now. Inbox rows of ended follows, blocks or posts turned
// SELF fall out here (FEED-02). The re-check is a LATERAL subquery kept
// apart by OFFSET 0, so each inbox row costs one social_post and one
// social_relation primary-key probe and the scan stops after the page:
// joined flat, the planner may (misjudging the readable posts of the
// followed authors as a few dozen) materialise every readable post of
// every followed author and match the inbox against it, which examines the
// reader's whole history (issue 19; bench growth's feed page row).
var normalPush = `
    SELECT c.* FROM social_feed_inbox i` + readableNow("i.post_id") + `
     WHERE i.reader = @reader::text AND (i.created_at, i.post_id) < (@cursor_at::timestamptz, @cursor_id::bigint)
     ORDER BY i.created_at DESC, i.post_id DESC
     LIMIT @limit::int + 1`

// The pull side merges authors' settled timelines: for each followed
// author (rows f of social_relation), its newest readable posts before the
// cursor — at most a page each, re-checked inside the lateral so a SELF
// post cannot crowd out a readable one — then the newest page of all.
// pullLateral + narrowing of the posts (hybrid: the ones not pushed) +
// pullRest + the authors' filter + pullTail; pull and hybrid each have
// their fixed statement.
const pullLateral = `
     CROSS JOIN LATERAL (
            SELECT ` + postColumns + `, f.version AS follow_version
              FROM social_feed_post fp
              JOIN social_readable_posts(@reader::text) p ON p.post_id = fp.post_id
             WHERE fp.author = f.followee`

const pullRest = `
               AND (fp.created_at, fp.post_id) < (@cursor_at::timestamptz, @cursor_id::bigint)
             ORDER BY fp.created_at DESC, fp.post_id DESC
             LIMIT @limit::int + 1) c
     WHERE `

const pullTail = `
     ORDER BY c.created_at DESC, c.post_id DESC
     LIMIT @limit::int + 1`

const (
	normalPull = `
    SELECT c.* FROM social_relation f` + pullLateral + pullRest + `f.follower = @reader::text AND f.state = 'active'` + pullTail
	// The hybrid's pull side: only the followed authors in the pull set,
	// only their posts that were not pushed (FEED-I2 checks the set covers
	// every such post), so no post comes from both sides.
	normalHybridPull = `
    SELECT c.* FROM social_feed_pull_author a
      JOIN social_relation f ON f.follower = @reader::text AND f.followee = a.author AND f.state = 'active'` +
		pullLateral + " AND NOT fp.pushed" + pullRest + "true" + pullTail
)

// normalHybrid is the push page and the hybrid's pull side, merged.
var normalHybrid = `
    SELECT h.* FROM ((` + normalPush + `)
            UNION ALL
            (` + normalHybridPull + `)) h
     ORDER BY h.created_at DESC, h.post_id DESC
     LIMIT @limit::int + 1`

// The page statements: [0] without the response log, [1] with it.
var (
	pagePush   = pageHead + pushBlocker + pageLate + lateFromInbox + pageNormal + normalPush + pageRest
	pagePull   = pageHead + noBlocker + pageLate + lateFromAll + pageNormal + normalPull + pageRest
	pageHybrid = pageHead + noBlocker + pageLate + lateFromHybrid + pageNormal + normalHybrid + pageRest
)

// They take eight named parameters (pageArgs), rewritten to $n once
// (pg.MustNamed): a page is read on every request.
var (
	sqlPagePush   = [2]pg.Named{pg.MustNamed(pagePush + pageTail), pg.MustNamed(pagePush + sqlLogServed + pageTail)}
	sqlPagePull   = [2]pg.Named{pg.MustNamed(pagePull + pageTail), pg.MustNamed(pagePull + sqlLogServed + pageTail)}
	sqlPageHybrid = [2]pg.Named{pg.MustNamed(pageHybrid + pageTail), pg.MustNamed(pageHybrid + sqlLogServed + pageTail)}
)

// SQLPagePush is the push strategy's page statement with its response
// log, as the product runs it (read-only). It is exported for one reader:
// the lab's naive feed (lab/feed) runs this very statement minus its
// access re-check, so the naive page differs from the product's by the
// guard alone (FEED-I1).
var SQLPagePush = pagePush + sqlLogServed + pageTail

// sqlAsyncCommit makes the logged read's commit asynchronous: losing the
// last log rows in a crash only shortens the audit, and a read should not
// wait for a WAL flush. It runs in the same implicit transaction as the
// page (one pgx batch).
const sqlAsyncCommit = `SELECT set_config('synchronous_commit', 'off', true)`

// sqlSettle settles a batch of new posts (the fan-out consumer's handler):
// records each post's keyset position, settle seq and fan-out decision,
// adds the authors whose posts are not pushed to the pull set, and pushes
// the others into their authors' active followers' inboxes — the
// followers as of this statement, which runs after the post committed.
// Decision ($2): NULL pushes every post, 0 none, n the posts of authors
// with fewer than n active followers (counted up to n, so deciding never
// costs more than n index entries). A redelivered or replayed post is
// already settled: ON CONFLICT leaves it, and its fan-out, alone. It
// returns the inbox rows written per settled post.
const sqlSettle = `
WITH posts AS (
    SELECT p.post_id, p.author, p.created_at,
           CASE WHEN $2::bigint IS NULL THEN true
                WHEN $2::bigint <= 0 THEN false
                ELSE (SELECT count(*) FROM (SELECT 1 FROM social_relation r
                                             WHERE r.followee = p.author AND r.state = 'active'
                                             LIMIT $2::bigint) n) < $2::bigint
           END AS pushed
      FROM social_post p
     WHERE p.post_id = ANY ($1::bigint[])
     ORDER BY p.created_at, p.post_id),
settled AS (
    INSERT INTO social_feed_post (post_id, author, created_at, pushed)
    SELECT post_id, author, created_at, pushed FROM posts
    ON CONFLICT (post_id) DO NOTHING
    RETURNING post_id, author, created_at, pushed),
pull AS (
    INSERT INTO social_feed_pull_author (author)
    SELECT DISTINCT author FROM settled WHERE NOT pushed
    ON CONFLICT (author) DO NOTHING),
fanned AS (
    INSERT INTO social_feed_inbox (reader, created_at, post_id)
    SELECT r.follower, s.created_at, s.post_id
      FROM settled s
      JOIN social_relation r ON r.followee = s.author AND r.state = 'active'
     WHERE s.pushed
    ON CONFLICT DO NOTHING
    RETURNING post_id)
SELECT s.post_id, s.pushed, s.created_at, coalesce(n.rows, 0)
  FROM settled s
  LEFT JOIN (SELECT post_id, count(*) AS rows FROM fanned GROUP BY post_id) n USING (post_id)`

// sqlBackfill gives a follow that became active the author's newest $3
// pushed posts settled so far (those settled later are fanned out to it
// by sqlSettle): one range of social_feed_post_pushed per follow, so a new
// follower of an author with years of posts costs $3 rows, not the years.
// Reading further back in a push feed shows nothing older; pull and
// hybrid reads do (docs/DATA.md). The follow is re-read from the truth:
// an event applied after the follow ended writes nothing.
const sqlBackfill = `
INSERT INTO social_feed_inbox (reader, created_at, post_id)
SELECT r.follower, fp.created_at, fp.post_id
  FROM unnest($1::text[], $2::text[]) AS e(follower, followee)
  JOIN social_relation r ON r.follower = e.follower AND r.followee = e.followee AND r.state = 'active'
 CROSS JOIN LATERAL (
       SELECT p.created_at, p.post_id FROM social_feed_post p
        WHERE p.author = r.followee AND p.pushed
        ORDER BY p.created_at DESC, p.post_id DESC
        LIMIT $3) fp
ON CONFLICT DO NOTHING`

// sqlPurgeInbox is the inbox retention (feed.purge,
// FENCELAB_FEED_INBOX_RETENTION, docs/DATA.md): up to $2 inbox rows of
// posts created more than $1 microseconds ago by the database clock,
// oldest first along social_feed_inbox_created, locked with SKIP LOCKED
// and deleted by row address, so a batch examines what it deletes. The
// same statement raises the horizon to the cutoff, so no commit shows a
// purged row below a horizon that does not cover it (FEED-I2 judges push
// from the horizon on).
const sqlPurgeInbox = `
WITH cut AS MATERIALIZED (
    SELECT now() - $1::bigint * interval '1 microsecond' AS at
), horizon AS (
    INSERT INTO social_feed_inbox_horizon (one, horizon) SELECT true, at FROM cut
    ON CONFLICT (one) DO UPDATE SET horizon = greatest(social_feed_inbox_horizon.horizon, EXCLUDED.horizon)
), doomed AS (
    SELECT ctid FROM social_feed_inbox
     WHERE created_at < (SELECT at FROM cut)
     ORDER BY created_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM social_feed_inbox WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT count(*) FROM gone`

// sqlPruneServed keeps the newest $1 rows of the response log.
const sqlPruneServed = `
DELETE FROM social_feed_served WHERE id <= (SELECT max(id) FROM social_feed_served) - $1::bigint`

// Rebuild: the derived state from the truth, set-based (load.go). The
// caller holds the fan-out consumer (outbox.LockPosition), so the seqs
// taken here are ordered with every batch's (the prefix property).
const (
	sqlResetFeed = `TRUNCATE social_feed_inbox, social_feed_pull_author, social_feed_post`

	// sqlSettleAll settles every post not settled yet, with the decision
	// sqlSettle would take ($1 as there).
	sqlSettleAll = `
INSERT INTO social_feed_post (post_id, author, created_at, pushed)
SELECT p.post_id, p.author, p.created_at,
       CASE WHEN $1::bigint IS NULL THEN true WHEN $1::bigint <= 0 THEN false ELSE coalesce(c.n, 0) < $1::bigint END
  FROM social_post p
  LEFT JOIN (SELECT followee, count(*) AS n FROM social_relation WHERE state = 'active' GROUP BY followee) c
         ON c.followee = p.author
 WHERE NOT EXISTS (SELECT 1 FROM social_feed_post fp WHERE fp.post_id = p.post_id)
 ORDER BY p.created_at, p.post_id`

	sqlPullAuthorsAll = `
INSERT INTO social_feed_pull_author (author)
SELECT DISTINCT author FROM social_feed_post WHERE NOT pushed
ON CONFLICT (author) DO NOTHING`

	// sqlFanOutAll writes every pushed post into every active follower's
	// inbox, in key order (the primary key's), which keeps a bulk build's
	// index inserts local.
	sqlFanOutAll = `
INSERT INTO social_feed_inbox (reader, created_at, post_id)
SELECT r.follower, fp.created_at, fp.post_id
  FROM social_feed_post fp
  JOIN social_relation r ON r.followee = fp.author AND r.state = 'active'
 WHERE fp.pushed
 ORDER BY 1, 2, 3
ON CONFLICT DO NOTHING`
)

// The seed loader (load.go): the truth as rel would have written it, one
// unnest batch per statement, each change with its outbox event in the
// same transaction (REL-I1).
const (
	sqlFeedCounts = `
SELECT (SELECT count(*) FROM social_feed_post),
       (SELECT count(*) FROM social_feed_post WHERE pushed),
       (SELECT count(*) FROM social_feed_inbox),
       (SELECT count(*) FROM social_feed_pull_author)`
)
