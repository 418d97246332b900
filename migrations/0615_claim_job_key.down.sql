CREATE INDEX job_history_key ON job_history (kind, business_key);
ALTER TABLE job ADD CONSTRAINT job_kind_business_key_key UNIQUE (kind, business_key);

CREATE FUNCTION job_key_unique_across_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM job_history WHERE kind = NEW.kind AND business_key = NEW.business_key) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "job_kind_business_key_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'job_kind_business_key_key',
                  DETAIL = format('Key (kind, business_key)=(%s, %s) belongs to a finished job.', NEW.kind, NEW.business_key);
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER job_key_unique_across_history AFTER INSERT ON job
    FOR EACH ROW EXECUTE FUNCTION job_key_unique_across_history();

DROP TABLE job_key;
