CREATE OR REPLACE FUNCTION lease_history_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'P0001';
END
$$;

DROP INDEX IF EXISTS fence_guard_lease;
DROP INDEX IF EXISTS lease_granted;
