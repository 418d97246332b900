package feed

import (
	"strconv"

	"github.com/fencelab/fencelab/core/invariant"
)

const chapter = "home feed (chapter 9)"

// sqlFEED1 replays the response log (social_feed_served): for every post
// served, the follow row and the post as the serving statement saw them —
// at the versions it recorded — must have allowed the read. A version's
// state is the row's if it has not changed since, else the outbox event
// that carries that version (REL-I1: exactly one); an event purged since
// leaves that row unjudged. (judged is MATERIALIZED so that it is
// planned for all its rows: under the LIMIT the check runs in, the planner
// would otherwise pick nested loops over the outbox, quadratic on a clean
// log.) An active follow at the served version also
// rules out a block of either direction in that snapshot: a block ends
// both follows in its own transaction (REL-I2), so the remaining rule is
// "not SELF".
const sqlFEED1 = `
WITH rel_ev AS (
    SELECT e.payload->>'follower' AS follower, e.payload->>'followee' AS followee,
           (e.payload->>'version')::bigint AS version, e.payload->>'state' AS state
      FROM outbox_event e WHERE e.topic = 'social.rel'),
post_ev AS (
    SELECT (e.payload->>'post_id')::bigint AS post_id, (e.payload->>'version')::bigint AS version,
           e.payload->>'visibility' AS visibility
      FROM outbox_event e WHERE e.topic = 'social.post'),
judged AS MATERIALIZED (
    SELECT s.id, s.reader, s.post_id, s.author, s.strategy, s.follow_version, s.post_version, s.served_at,
           r.version AS follow_now, p.version AS post_now, p.author AS post_author,
           CASE WHEN r.version = s.follow_version THEN r.state ELSE re.state END AS follow_state,
           CASE WHEN p.version = s.post_version THEN p.visibility ELSE pe.visibility END AS visibility
      FROM social_feed_served s
      LEFT JOIN social_relation r ON r.follower = s.reader AND r.followee = s.author
      LEFT JOIN rel_ev re ON re.follower = s.reader AND re.followee = s.author AND re.version = s.follow_version
      LEFT JOIN social_post p ON p.post_id = s.post_id
      LEFT JOIN post_ev pe ON pe.post_id = s.post_id AND pe.version = s.post_version)
SELECT CASE WHEN post_author IS NULL THEN 'served a post that does not exist'
            WHEN post_author <> author THEN 'served a post under another author'
            WHEN coalesce(follow_now, 0) < follow_version OR post_now < post_version THEN 'served versions the truth never had'
            WHEN follow_state <> 'active' THEN 'served without an active follow'
            ELSE 'served a SELF post' END AS problem,
       id AS served_id, reader, post_id, strategy,
       format('follow v%s (%s), post v%s (%s), served %s', follow_version, coalesce(follow_state, 'purged'),
              post_version, coalesce(visibility, 'purged'), served_at) AS detail
  FROM judged
 WHERE post_author IS NULL OR post_author <> author
    OR coalesce(follow_now, 0) < follow_version OR post_now < post_version
    OR follow_state <> 'active' OR visibility = 'SELF'`

// sqlFEED2 is what SQL can check of "push, pull and hybrid agree": the
// structure that makes them read the same posts once the fan-out
// consumer has caught up (the e2e tests compare the pages themselves).
//
//   - Every settled post agrees with social_post (pull's keyset position is
//     the post's).
//   - Every creation event the consumer has passed settled its post (no
//     post missing from all three).
//   - Every inbox row is a settled, pushed post at its keyset position (push
//     adds nothing, and hybrid takes no post from both sides).
//   - Every pushed post among its author's newest MinBackfillPosts is in
//     the inbox of every active follower whose current relation event the
//     consumer has applied (push misses nothing pull shows in that range).
//     Such a post either settled after the follow was applied (sqlSettle
//     fanned it out) or was, at the backfill, among the author's newest
//     FENCELAB_FEED_BACKFILL_POSTS ≥ MinBackfillPosts pushed posts (its
//     rank only grows as the author posts). Posts created before the
//     inbox retention's horizon are not judged: feed.purge has removed
//     their rows (social_feed_inbox_horizon, written in the deleting
//     statement).
//   - Every post that was not pushed has its author in the pull set
//     (hybrid's pull side sees it; push refuses readers of that author).
//
// minBackfill is MinBackfillPosts, spelled for the SQL.
var minBackfill = strconv.Itoa(MinBackfillPosts)

var sqlFEED2 = `
SELECT 'settled post disagrees with social_post' AS problem, NULL::text AS reader, fp.post_id,
       format('settled %s at %s; post %s at %s', fp.author, fp.created_at, coalesce(p.author, '(none)'), p.created_at) AS detail
  FROM social_feed_post fp
  LEFT JOIN social_post p ON p.post_id = fp.post_id
 WHERE p.post_id IS NULL OR p.author <> fp.author OR p.created_at <> fp.created_at
UNION ALL
SELECT 'creation event applied, post not settled', NULL, (e.payload->>'post_id')::bigint,
       format('event %s', e.id)
  FROM outbox_event e
  JOIN outbox_consumer c ON c.name = 'social.feed.fanout'
 WHERE e.topic = 'social.post' AND (e.payload->>'version')::bigint = 1
   AND (e.tx_id, e.id) <= (c.position_tx, c.position_id)
   AND NOT EXISTS (SELECT 1 FROM social_feed_post fp WHERE fp.post_id = (e.payload->>'post_id')::bigint)
UNION ALL
SELECT 'inbox row without its pushed settled post', i.reader, i.post_id,
       format('inbox at %s; settled %s, pushed %s', i.created_at, fp.created_at, fp.pushed)
  FROM social_feed_inbox i
  LEFT JOIN social_feed_post fp ON fp.post_id = i.post_id
 WHERE fp.post_id IS NULL OR NOT fp.pushed OR fp.created_at <> i.created_at
UNION ALL
SELECT 'pushed post missing from an active follower''s inbox', r.follower, fp.post_id,
       format('author %s, follow version %s applied', fp.author, r.version)
  FROM (SELECT p.*, row_number() OVER (PARTITION BY p.author ORDER BY p.created_at DESC, p.post_id DESC) AS rank
          FROM social_feed_post p WHERE p.pushed) fp
  JOIN social_relation r ON r.followee = fp.author AND r.state = 'active'
  JOIN outbox_consumer c ON c.name = 'social.feed.fanout'
 WHERE fp.rank <= ` + minBackfill + `
   AND fp.created_at >= coalesce((SELECT h.horizon FROM social_feed_inbox_horizon h), '-infinity')
   AND (r.changed_tx, r.event_id) <= (c.position_tx, c.position_id)
   AND NOT EXISTS (SELECT 1 FROM social_feed_inbox i
                    WHERE i.reader = r.follower AND i.created_at = fp.created_at AND i.post_id = fp.post_id)
UNION ALL
SELECT 'post not pushed, author not in the pull set', NULL, fp.post_id, format('author %s', fp.author)
  FROM social_feed_post fp
 WHERE NOT fp.pushed AND NOT EXISTS (SELECT 1 FROM social_feed_pull_author a WHERE a.author = fp.author)`

// Invariants are the package's SQL invariants; its module lists them in
// app.Module.Invariants.
var Invariants = []invariant.Invariant{

	{
		ID: "FEED-I1", Module: "social", Chapter: chapter,
		Statement: "no feed response contains a post the reader may not read at response time (checked over the recorded response log)",
		SQL:       sqlFEED1,
	},
	{
		ID: "FEED-I2", Module: "social", Chapter: chapter,
		Statement: "push, pull and hybrid return the same posts in the same order for the same reader and cursor (SQL: settled posts, inboxes and the pull set are complete and sound once the fan-out has caught up)",
		SQL:       sqlFEED2,
	},
}
