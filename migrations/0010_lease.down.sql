DROP TABLE fence_guard;
DROP TABLE lease_grant;
DROP FUNCTION lease_history_append_only();
DROP TABLE lease;
