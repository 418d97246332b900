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
	if err := Exec(ctx, srv.URL(""), `CREATE DATABASE `+db); err != nil {
		return "", nil, fmt.Errorf("create the scratch database %s: %w", name, err)
	}
	drop = func() error {
		return Exec(context.Background(), srv.URL(""), `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`)
	}
	url = srv.URL(name)
	if err := (pg.Migrator{FS: migrations.FS, URL: url}).Up(); err != nil {
		_ = drop()
		return "", nil, err
	}
	return url, drop, nil
}

// Exec runs one statement on url over a connection of its own (CREATE and
// DROP DATABASE cannot run in a transaction or on the database they name).
func Exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
