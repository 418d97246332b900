-- Short links, bounded growth (docs/DATA.md).

-- One row per link that has stored clicks or counted drops: the stats
-- read is a primary-key lookup, never a count over the history. The click
-- writer maintains it in the statement that inserts a batch (only the
-- clicks the statement inserted count, so a retried batch adds nothing:
-- SL-I4), and the retention purge moves what it deletes from the row
-- tables into purged_clicks / purged_drops in the statement that deletes
-- it, so SL-I5 holds at every commit:
--   clicks  = count(shortlink_clicks of the code) + purged_clicks
--   dropped = sum(shortlink_click_drops of the code) + purged_drops
CREATE TABLE IF NOT EXISTS shortlink_click_count (
    code          text   PRIMARY KEY,
    clicks        bigint NOT NULL DEFAULT 0 CHECK (clicks >= 0),
    purged_clicks bigint NOT NULL DEFAULT 0 CHECK (purged_clicks >= 0),
    dropped       bigint NOT NULL DEFAULT 0 CHECK (dropped >= 0),
    purged_drops  bigint NOT NULL DEFAULT 0 CHECK (purged_drops >= 0)
);

INSERT INTO shortlink_click_count (code, clicks, dropped)
SELECT code, sum(c), sum(d)
  FROM (SELECT code, count(*) AS c, 0 AS d FROM shortlink_clicks GROUP BY code
        UNION ALL
        SELECT code, 0, sum(dropped) FROM shortlink_click_drops GROUP BY code) x
 GROUP BY code
ON CONFLICT (code) DO NOTHING;

-- The retention purge (shortlink.purge, FENCELAB_SHORTLINK_CLICK_RETENTION):
-- oldest first.
CREATE INDEX IF NOT EXISTS shortlink_clicks_clicked_at ON shortlink_clicks (clicked_at);
CREATE INDEX IF NOT EXISTS shortlink_click_drops_flushed_at ON shortlink_click_drops (flushed_at);
