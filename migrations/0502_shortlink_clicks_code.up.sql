-- Short links: the redirect's cost (issue 25). Every click is a row, so
-- every index on shortlink_clicks is work on the redirect's hottest write.
-- shortlink_clicks_code served the stats read's count(*) by code; since
-- 0501 the stats read the per-link counter (SL-I5), and nothing reads
-- clicks by code on a hot path (the invariants scan the table whole). The
-- primary key (SL-I4) and shortlink_clicks_clicked_at (the retention
-- purge) stay. CONCURRENTLY: a live clicks table is not locked against
-- the writers while the index goes.
DROP INDEX CONCURRENTLY IF EXISTS shortlink_clicks_code;
