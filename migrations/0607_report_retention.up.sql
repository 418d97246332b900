-- Bounded growth of the lease chapter's history (docs/DATA.md,
-- report.purge, FENCELAB_REPORT_RETENTION). report.purge deletes a whole
-- report day in one transaction: core/lease's lease.PurgeTx takes the
-- day's lease `report:YYYY-MM-DD` with every grant and the fence guards
-- bound to it, once its latest grant and its expiry are both older than
-- the retention by the database clock, oldest grant first from
-- lease_granted; services/report then deletes the day's report_write and
-- report_output rows.
CREATE INDEX IF NOT EXISTS lease_granted ON lease (granted_at);
-- The guards bound to a purged lease, by key.
CREATE INDEX IF NOT EXISTS fence_guard_lease ON fence_guard (lease_name);

-- LOCK-I1, LOCK-I2: lease_grant and report_write stay append-only — never
-- updated, never truncated, and never deleted except by the retention,
-- which deletes all of a lease's grants (LOCK-I1's per-name order) and
-- all of a date's writes (LOCK-I2's per-date order) at once, and says so
-- for its own transaction with set_config('fencelab.lease_purge', 'on',
-- true) (core/lease, for lease_grant) or set_config('fencelab.report_purge',
-- 'on', true) (services/report, for report_write): each owner opens only
-- its own table.
CREATE OR REPLACE FUNCTION lease_history_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND (
        (TG_TABLE_NAME = 'lease_grant' AND current_setting('fencelab.lease_purge', true) = 'on') OR
        (TG_TABLE_NAME = 'report_write' AND current_setting('fencelab.report_purge', true) = 'on')) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'P0001';
END
$$;
