CREATE OR REPLACE FUNCTION lease_history_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'P0001';
END
$$;

DROP FUNCTION IF EXISTS report_lease_day(text);
DROP INDEX IF EXISTS lease_report_granted;
