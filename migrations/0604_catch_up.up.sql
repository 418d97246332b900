-- Catch-up for 0502 (issue 25), added below the top 0603: a dev database
-- migrated to 0603 before 0502 existed never applies it, so this file
-- repeats it. Idempotent: on a database that ran 0502 it does nothing.
-- CONCURRENTLY (the only statement in the file): the clicks table is not
-- locked against the writers while the index goes.
DROP INDEX CONCURRENTLY IF EXISTS shortlink_clicks_code;
