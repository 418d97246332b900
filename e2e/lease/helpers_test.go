package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

var ctx = context.Background()

// The day every experiment reports on: pinned, so no test depends on the
// calendar.
var day = mustDate("2026-05-01")

func mustDate(s string) time.Time {
	d, err := report.ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

// instance is one report-job instance of the app under test, as a separate
// deployment would run it: its own holder identity, the app's pool and
// fault points. out == nil means the production (fenced) output.
func instance(t *testing.T, a *e2etest.App, holder string, out report.Output) *report.Service {
	t.Helper()
	svc, err := report.NewService(a.Deps, report.Config{Holder: holder, TTL: time.Hour, Interval: time.Minute, Output: out})
	require.NoError(t, err)
	return svc
}

// forceExpiry puts the lease exactly at its expiry boundary (expires_at =
// now()): every later statement finds it expired. This replaces a sleep
// past the TTL with an exact, instant injection.
func forceExpiry(t *testing.T, db pg.Querier, name string, fence int64) {
	t.Helper()
	tag, err := db.Exec(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1 AND fence = $2`, name, fence)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "lease %q at fence %d", name, fence)
}

type grant struct {
	Holder string
	Fence  int64
}

func grantsOf(t *testing.T, db pg.Querier, name string) []grant {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT holder, fence FROM lease_grant WHERE name = $1 ORDER BY id`, name)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[grant])
	require.NoError(t, err)
	return out
}
