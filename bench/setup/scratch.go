package setup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

// Scratch creates database name on srv and migrates it, for a bench that
// measures databases of its own side by side; drop removes it again
// (WITH (FORCE): the bench's pools may still hold sessions).
func Scratch(ctx context.Context, srv *pgserver.Server, name string) (url string, drop func() error, err error) {
	db := pgx.Identifier{name}.Sanitize()
	if err := srv.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		return "", nil, fmt.Errorf("create the scratch database %s: %w", name, err)
	}
	drop = func() error {
		return srv.Exec(context.Background(), `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`)
	}
	url = srv.URL(name)
	if err := (pg.Migrator{FS: migrations.FS, URL: url}).Up(); err != nil {
		_ = drop()
		return "", nil, err
	}
	return url, drop, nil
}
