package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// The console's sessions (table console_session, migration 0613). The
// cookie carries a random id of 256 bits; the table keeps its SHA-256
// only, so a copy of the table opens no session. Every page view looks
// the session up by that hash (its primary key), on the database clock.
const (
	sqlSessionCreate = `
INSERT INTO console_session (id_hash, subject, role, expires_at)
VALUES (@id_hash, @subject, @role, LEAST(now() + make_interval(secs => @ttl_s), @token_expires))
RETURNING expires_at`

	sqlSessionGet = `
SELECT subject, role FROM console_session WHERE id_hash = @id_hash AND expires_at > now()`

	sqlSessionDelete = `DELETE FROM console_session WHERE id_hash = @id_hash`

	// sqlSessionPurge deletes up to @batch sessions that expired, oldest
	// expiry first from console_session_expires; SKIP LOCKED keeps two
	// purges (or a purge and a sign-out) off each other's rows.
	sqlSessionPurge = `
WITH dead AS (
    SELECT id_hash FROM console_session WHERE expires_at <= now()
    ORDER BY expires_at LIMIT @batch FOR UPDATE SKIP LOCKED)
DELETE FROM console_session s USING dead WHERE s.id_hash = dead.id_hash`
)

// DefaultSessionTTL is the longest a console session lives
// (FENCELAB_CONSOLE_SESSION_TTL); it never outlives the token that
// opened it.
const DefaultSessionTTL = 12 * time.Hour

// purgeBatch bounds one console.purge statement.
const purgeBatch = 1000

// PurgeKindName is the periodic kind that deletes expired sessions.
const PurgeKindName = "console.purge"

var errNoSession = errors.New("console: no such session")

type sessionStore struct {
	pool *pgxpool.Pool
	ttl  time.Duration
}

func hashID(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// create opens a session for p, which a token valid until tokenExpires
// proved, and returns its id (the cookie's value).
func (s *sessionStore) create(ctx context.Context, p httpx.Principal, tokenExpires time.Time) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	var exp time.Time
	err := s.pool.QueryRow(ctx, sqlSessionCreate, pgx.NamedArgs{
		"id_hash": hashID(id), "subject": p.Subject, "role": string(p.Role),
		"ttl_s": s.ttl.Seconds(), "token_expires": tokenExpires,
	}).Scan(&exp)
	if err != nil {
		return "", fmt.Errorf("console: open a session: %w", pg.MapError(err))
	}
	return id, nil
}

// get returns the live session id names (errNoSession when it was
// signed out, expired or never existed).
func (s *sessionStore) get(ctx context.Context, id string) (httpx.Principal, error) {
	var p httpx.Principal
	var role string
	err := s.pool.QueryRow(ctx, sqlSessionGet, pgx.NamedArgs{"id_hash": hashID(id)}).Scan(&p.Subject, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, errNoSession
	}
	if err != nil {
		return p, fmt.Errorf("console: read a session: %w", pg.MapError(err))
	}
	p.Role = httpx.Role(role)
	return p, nil
}

// delete ends a session (signing out); deleting a gone one is no error.
func (s *sessionStore) delete(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, sqlSessionDelete, pgx.NamedArgs{"id_hash": hashID(id)}); err != nil {
		return fmt.Errorf("console: end a session: %w", pg.MapError(err))
	}
	return nil
}

// purge deletes expired sessions in batches until a batch comes back
// short, and returns how many went.
func (s *sessionStore) purge(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, sqlSessionPurge, pgx.NamedArgs{"batch": purgeBatch})
		if err != nil {
			return total, fmt.Errorf("console: purge sessions: %w", pg.MapError(err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}
