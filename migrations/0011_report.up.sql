-- services/report: the chapter's daily report, the resource the lease
-- protects. Written only through the fence guard (LOCK-I2).
CREATE TABLE report_output (
    report_date    date PRIMARY KEY,
    content        text NOT NULL,
    written_fence  bigint NOT NULL,
    written_by     text NOT NULL,
    written_at     timestamptz NOT NULL,
    CONSTRAINT report_output_fence_positive CHECK (written_fence > 0)
);

-- Every accepted write, appended in the writing transaction, so LOCK-I2
-- ("no write carries a fence lower than one that already wrote") can be
-- checked after the fact instead of trusted.
CREATE TABLE report_write (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    report_date  date NOT NULL,
    fence        bigint NOT NULL,
    holder       text NOT NULL,
    written_at   timestamptz NOT NULL
);
CREATE INDEX report_write_by_date ON report_write (report_date, id);

CREATE TRIGGER report_write_append_only
    BEFORE UPDATE OR DELETE ON report_write
    FOR EACH ROW EXECUTE FUNCTION lease_history_append_only();
CREATE TRIGGER report_write_no_truncate
    BEFORE TRUNCATE ON report_write
    FOR EACH STATEMENT EXECUTE FUNCTION lease_history_append_only();
