package console

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A session is dead at its expiry (never later than its token's), and
// console.purge deletes the dead ones and only those.
func TestExpiredConsoleSessionsArePurged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	s := &sessionStore{pool: pool, ttl: time.Hour}
	p := httpx.Principal{Subject: "admin-0001", Role: httpx.RoleAdmin}

	live, err := s.create(ctx, p, time.Now().Add(24*time.Hour))
	require.NoError(t, err)
	dead, err := s.create(ctx, p, time.Now().Add(24*time.Hour))
	require.NoError(t, err)
	// The session's life is the shorter of the TTL and the token's.
	var life time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - created_at)::float8 * interval '1 second' FROM console_session WHERE id_hash = $1`, hashID(live)).Scan(&life))
	require.InDelta(t, time.Hour.Seconds(), life.Seconds(), 5)
	short, err := s.create(ctx, p, time.Now().Add(10*time.Minute))
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - created_at)::float8 * interval '1 second' FROM console_session WHERE id_hash = $1`, hashID(short)).Scan(&life))
	require.InDelta(t, (10 * time.Minute).Seconds(), life.Seconds(), 5, "a session never outlives its token")

	// Expiry forced with SQL, on the database clock.
	_, err = pool.Exec(ctx, `UPDATE console_session SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour' WHERE id_hash = $1`, hashID(dead))
	require.NoError(t, err)
	_, err = s.get(ctx, dead)
	require.ErrorIs(t, err, errNoSession, "an expired session opens nothing, purged or not")

	n, err := s.purge(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM console_session`).Scan(&left))
	require.Equal(t, 2, left)
	got, err := s.get(ctx, live)
	require.NoError(t, err)
	require.Equal(t, p, got)

	// The table never holds the cookie's value, only its hash.
	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM console_session WHERE encode(id_hash, 'escape') = $1`, live).Scan(&stored))
	require.Zero(t, stored)
}
