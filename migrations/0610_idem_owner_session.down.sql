ALTER TABLE idem_request
    DROP CONSTRAINT idem_request_owner_in_flight,
    DROP CONSTRAINT idem_request_owner_pair,
    DROP COLUMN owner_started,
    DROP COLUMN owner_pid;
