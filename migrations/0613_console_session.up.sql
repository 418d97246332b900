-- 0613 console: the console's signed-in sessions, kept on the server so
-- that signing out revokes one (docs/console.md). The cookie carries a
-- random session id; the table keeps only its SHA-256, so reading the
-- table gives nobody a live cookie. A row is dead at expires_at (never
-- later than the token that opened it) and console.purge deletes it.
CREATE TABLE console_session (
    id_hash    bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    subject    text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    role       text        NOT NULL CHECK (role IN ('admin', 'user', 'service')),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);

-- console.purge walks the expired sessions from the oldest expiry.
CREATE INDEX console_session_expires ON console_session (expires_at);
