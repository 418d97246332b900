-- services/report: bounded growth of the lease chapter's history
-- (docs/DATA.md, report.purge, FENCELAB_REPORT_RETENTION). A report day
-- (its lease `report:YYYY-MM-DD` with every grant, its report_write rows,
-- its report_output row and its fence_guard row) is deleted whole, in one
-- statement, once its lease's latest grant and its expiry are both older
-- than the retention by the database clock; oldest grant first from this
-- index. Only report leases are purged, so the index holds only them.
CREATE INDEX IF NOT EXISTS lease_report_granted ON lease (granted_at) WHERE name LIKE 'report:%';

-- The day a report lease names ('report:YYYY-MM-DD' → that date), or NULL
-- for a name that is not one (report.purge then deletes only its lease
-- and grants). Never raises: one odd name must not stop the retention.
CREATE OR REPLACE FUNCTION report_lease_day(lease_name text) RETURNS date
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF lease_name !~ '^report:[0-9]{4}-[0-9]{2}-[0-9]{2}$' THEN
        RETURN NULL;
    END IF;
    RETURN substr(lease_name, 8)::date;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;

-- LOCK-I1, LOCK-I2: lease_grant and report_write stay append-only — never
-- updated, never truncated, and never deleted except by the retention
-- purge, which deletes a whole report day at once (its lease row and every
-- grant, write, output and guard row of that day, so LOCK-I1's per-name
-- and LOCK-I2's per-date windows see all of a day or none of it) and says
-- so for its own transaction with set_config('fencelab.report_purge',
-- 'on', true).
CREATE OR REPLACE FUNCTION lease_history_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('fencelab.report_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'P0001';
END
$$;
