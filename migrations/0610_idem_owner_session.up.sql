-- core/idem (0030): an in-flight record remembers its owner's database
-- session, the presence connection of the process that claimed it
-- (core/idem/presence.go): its backend pid and backend start time, the pair
-- that names one session for the life of the server (a pid alone is reused).
-- A retry that finds no such session in pg_stat_activity takes the key over
-- at once instead of waiting out locked_until; the takeover is fenced as
-- before (IDEM-I1).
--
-- Both columns are nullable and set together: a record claimed by an older
-- binary, or while the process had no presence session, has neither and
-- is freed by its lock expiry alone, as before. A finished record has
-- neither either: only an in-flight record has an owner.
ALTER TABLE idem_request
    ADD COLUMN owner_pid     int,
    ADD COLUMN owner_started timestamptz,
    ADD CONSTRAINT idem_request_owner_pair CHECK ((owner_pid IS NULL) = (owner_started IS NULL)),
    ADD CONSTRAINT idem_request_owner_in_flight CHECK (owner_pid IS NULL OR state = 'in_flight');
