package shortlink

import "github.com/fencelab/fencelab/core/invariant"

const chapter = "short links"

// The invariants of chapter 12 ("Short links"). SL-I2 and SL-I3 are timing
// properties: TestSL02 measures the revocation window against the TTL and
// TestSL03 (with `fencelab bench shortlink`) the redirect under a sick stats
// store. What SQL can see of them is checked here.
var Invariants = []invariant.Invariant{

	{
		ID: "SL-I1", Module: "shortlink", Chapter: chapter,
		Statement: "a code maps to at most one target and is never overwritten; every caller told \"created\" finds its own target under that code",
		// shortlink_creations holds one row per caller told "created";
		// each must match the link, and each link has exactly one.
		SQL: `
SELECT 'stored link differs from what its creator was told' AS problem, l.code, c.owner, c.target AS told, l.target AS stored
  FROM shortlink_links l JOIN shortlink_creations c ON c.code = l.code
 WHERE (c.target, c.owner) IS DISTINCT FROM (l.target, l.owner)
UNION ALL
SELECT 'more than one caller told "created"', code, string_agg(owner, ','), NULL, NULL
  FROM shortlink_creations GROUP BY code HAVING count(*) > 1
UNION ALL
SELECT 'link without a creation record', l.code, l.owner, NULL, l.target
  FROM shortlink_links l WHERE NOT EXISTS (SELECT 1 FROM shortlink_creations c WHERE c.code = l.code)
UNION ALL
SELECT 'creation record whose link is gone', c.code, c.owner, c.target, NULL
  FROM shortlink_creations c WHERE NOT EXISTS (SELECT 1 FROM shortlink_links l WHERE l.code = c.code)`,
	},
	{
		ID: "SL-I2", Module: "shortlink", Chapter: chapter,
		Statement: "after a revoke commits, a 302 to the old target happens only within a window bounded by the cache TTL (measured by TestSL02); none at or after expiry",
		// Every stored click is a 302 that was served, stamped with the
		// instant its expiry was checked against. None may fall at or
		// after the expiry, nor later after a revocation than the
		// largest TTL the configuration accepts (1h).
		SQL: `
SELECT 'click at or after expiry' AS problem, l.code, c.clicked_at, l.expires_at AS limit_at
  FROM shortlink_clicks c JOIN shortlink_links l ON l.code = c.code
 WHERE c.clicked_at >= l.expires_at
UNION ALL
SELECT 'click more than the largest TTL after revocation', l.code, c.clicked_at, l.revoked_at
  FROM shortlink_clicks c JOIN shortlink_links l ON l.code = c.code
 WHERE c.clicked_at > l.revoked_at + interval '1 hour'`,
	},
	{
		ID: "SL-I3", Module: "shortlink", Chapter: chapter,
		Statement: "stats failures never change a redirect's status and the redirect never waits on the stats side (measured by TestSL03 and the benchmark)",
		// What the schema can promise: a click write touches nothing but
		// the stats tables — the clicks and their counters (SL-I5), no
		// foreign key, no trigger — and stats rows only name links that
		// exist.
		SQL: `
SELECT 'click of an unknown code' AS problem, c.code AS detail
  FROM shortlink_clicks c WHERE NOT EXISTS (SELECT 1 FROM shortlink_links l WHERE l.code = c.code)
UNION ALL
SELECT 'drop count of an unknown code', d.code
  FROM shortlink_click_drops d WHERE NOT EXISTS (SELECT 1 FROM shortlink_links l WHERE l.code = d.code)`,
	},
	{
		ID: "SL-I4", Module: "shortlink", Chapter: chapter,
		Statement: "a click written more than once by retries is one row; every dropped click is counted",
		SQL: `
SELECT 'duplicate click id' AS problem, id::text AS detail, count(*) AS n
  FROM shortlink_clicks GROUP BY id HAVING count(*) > 1
UNION ALL
SELECT 'drop count not positive', code, dropped
  FROM shortlink_click_drops WHERE dropped <= 0`,
	},
	{
		ID: "SL-I5", Module: "shortlink", Chapter: chapter,
		Statement: "a link's counters are its stored rows plus the rows the retention purge removed: stats read the counter, never a count over the history",
		// The writer and the purge move a counter in the statement that
		// inserts or deletes its rows, so this holds at every commit.
		SQL: `
SELECT 'click counter disagrees with the rows' AS problem, coalesce(k.code, c.code) AS code,
       coalesce(k.clicks, 0) AS counted, coalesce(c.n, 0) + coalesce(k.purged_clicks, 0) AS rows_plus_purged
  FROM shortlink_click_count k
  FULL JOIN (SELECT code, count(*) AS n FROM shortlink_clicks GROUP BY code) c ON c.code = k.code
 WHERE coalesce(k.clicks, 0) <> coalesce(c.n, 0) + coalesce(k.purged_clicks, 0)
UNION ALL
SELECT 'drop counter disagrees with the rows', coalesce(k.code, d.code), coalesce(k.dropped, 0),
       coalesce(d.n, 0) + coalesce(k.purged_drops, 0)
  FROM shortlink_click_count k
  FULL JOIN (SELECT code, sum(dropped) AS n FROM shortlink_click_drops GROUP BY code) d ON d.code = k.code
 WHERE coalesce(k.dropped, 0) <> coalesce(d.n, 0) + coalesce(k.purged_drops, 0)`,
	},
	{
		ID: "SL-S1", Module: "shortlink", Chapter: chapter, Schema: true,
		Statement: "the shortlink schema keeps its shape: a click write touches nothing but the stats tables (no foreign key, no trigger on shortlink_clicks: SL-I3) and a retried click is one row (the unique index behind SL-I4)",
		SQL: `
SELECT 'foreign key on shortlink_clicks' AS problem, conname::text AS detail
  FROM pg_constraint WHERE conrelid = 'shortlink_clicks'::regclass AND contype = 'f'
UNION ALL
SELECT 'trigger on shortlink_clicks', tgname::text
  FROM pg_trigger WHERE tgrelid = 'shortlink_clicks'::regclass AND NOT tgisinternal
UNION ALL
SELECT 'no unique index on shortlink_clicks (id)', NULL
 WHERE NOT EXISTS (
    SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE i.indrelid = 'shortlink_clicks'::regclass AND i.indisunique AND i.indnkeyatts = 1 AND a.attname = 'id')`,
	},
}
