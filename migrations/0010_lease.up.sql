-- core/lease: leases with fencing tokens (distributed-lock chapter).

-- One row per lease name, kept forever once created: the fence lives on the
-- row, so deleting it would restart the fence at 1 and let an old holder's
-- token look current again (LOCK-I1). Release and expiry only move
-- expires_at. A lease is live while now() < expires_at, by the database's
-- clock; no process clock takes part.
CREATE TABLE lease (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    fence       bigint NOT NULL,
    granted_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    CONSTRAINT lease_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lease_holder_length CHECK (char_length(holder) BETWEEN 1 AND 200),
    CONSTRAINT lease_fence_positive CHECK (fence > 0)
);

-- Every acquisition with the fence it issued, appended by the same
-- statement that grants the lease. LOCK-I1 is checked against it, so it
-- must never be rewritten.
CREATE TABLE lease_grant (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL REFERENCES lease (name),
    holder      text NOT NULL,
    fence       bigint NOT NULL,
    granted_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    CONSTRAINT lease_grant_fence_once UNIQUE (name, fence),
    CONSTRAINT lease_grant_fence_positive CHECK (fence > 0)
);

-- Shared by the append-only histories of the lease chapter (lease_grant,
-- report_write): history that can be edited proves nothing.
CREATE FUNCTION lease_history_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'P0001';
END
$$;

CREATE TRIGGER lease_grant_append_only
    BEFORE UPDATE OR DELETE ON lease_grant
    FOR EACH ROW EXECUTE FUNCTION lease_history_append_only();
CREATE TRIGGER lease_grant_no_truncate
    BEFORE TRUNCATE ON lease_grant
    FOR EACH STATEMENT EXECUTE FUNCTION lease_history_append_only();

-- The resource side of fencing: the highest fence any write to a protected
-- resource has carried. A write updates its resource's row WHERE max_fence
-- <= its fence, in the transaction that makes the write, so the comparison
-- and the write commit or roll back together. lease_name binds a resource
-- to one lease: fences of different leases are not comparable.
CREATE TABLE fence_guard (
    resource    text PRIMARY KEY,
    lease_name  text NOT NULL,
    max_fence   bigint NOT NULL,
    holder      text NOT NULL,
    updated_at  timestamptz NOT NULL,
    CONSTRAINT fence_guard_resource_length CHECK (char_length(resource) BETWEEN 1 AND 200),
    CONSTRAINT fence_guard_fence_positive CHECK (max_fence > 0)
);
