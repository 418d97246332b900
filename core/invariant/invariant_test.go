package invariant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var core = invariant.MustRegistry(invariant.Core)

// recorder is a TB that records instead of failing, so we can prove Assert
// does fail.
type recorder struct {
	failed bool
	msg    string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Errorf(f string, args ...any) { r.failed, r.msg = true, fmt.Sprintf(f, args...) }
func (r *recorder) FailNow()                     {}

func TestCoreInvariantHoldsOnAFreshDatabaseAndFailsWhenBroken(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	core.Assert(t, db, "CORE-I0")

	_, err := db.Exec(ctx, `UPDATE schema_migrations SET dirty = true`)
	require.NoError(t, err)
	res := core.Run(ctx, db, "CORE-I0")
	require.Len(t, res, 1)
	require.False(t, res[0].Holds())
	require.Len(t, res[0].Rows, 1)
	require.Equal(t, "dirty", res[0].Rows[0][0])

	rec := &recorder{}
	core.Assert(rec, db, "core")
	require.True(t, rec.failed)
	require.Contains(t, rec.msg, "CORE-I0")
	require.Contains(t, rec.msg, "dirty")
}

func TestAssertRefusesAnEmptySelection(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rec := &recorder{}
	core.Assert(rec, db, "no-such-module")
	require.True(t, rec.failed, "a typo must not make the assertion vacuous")
}

func TestRunBoundsRowsAndReportsBadSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	reg := invariant.MustRegistry([]invariant.Invariant{
		{ID: "TEST-I1", Module: "test", Statement: "many rows", SQL: `SELECT g FROM generate_series(1, 1000) g`},
		{ID: "TEST-I2", Module: "test", Statement: "bad sql", SQL: `SELECT nope FROM nowhere`},
	})
	res := reg.Run(context.Background(), db, "test")
	require.Len(t, res, 2)
	require.Len(t, res[0].Rows, invariant.MaxRows)
	require.True(t, res[0].More)
	require.Error(t, res[1].Err)
	var sb strings.Builder
	invariant.Format(&sb, res[0])
	require.Contains(t, sb.String(), "more than")
}

func TestRegistryRefusesDuplicatesAndIncompleteEntries(t *testing.T) {
	t.Parallel()
	inv := invariant.Invariant{ID: "TEST-I1", Module: "test", Statement: "s", SQL: `SELECT 1 WHERE false`}
	_, err := invariant.NewRegistry([]invariant.Invariant{inv}, []invariant.Invariant{inv})
	require.ErrorContains(t, err, "duplicate ID TEST-I1")
	_, err = invariant.NewRegistry([]invariant.Invariant{{ID: "TEST-I2", Module: "test"}})
	require.ErrorContains(t, err, "incomplete")
}
