package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
)

// requireCurrentSchema refuses to start a process on a database whose
// schema is behind the binary (or half-migrated): every request would
// otherwise be a 500 about a missing relation. A schema ahead of the
// binary is an older replica during a rollout; /readyz keeps it out of
// traffic, so it may start.
func requireCurrentSchema(ctx context.Context, q pg.Querier) error {
	st, err := pg.ReadMigrationState(ctx, q, migrations.FS)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table: never migrated
		err, st.Version = nil, 0
	}
	if err != nil {
		return err
	}
	switch {
	case st.Dirty:
		return fmt.Errorf("the database schema is dirty at version %d (a migration stopped half-way): "+
			"look at that migration, fix the database by hand, then run `fencelab migrate up`", st.Version)
	case st.Version < st.Latest:
		return fmt.Errorf("the database schema is at version %d, this binary needs %d: "+
			"run `fencelab migrate up` first (or start with --migrate)", st.Version, st.Latest)
	}
	return nil
}
