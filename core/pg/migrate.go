package pg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Migrator applies an embedded golang-migrate sequence.
type Migrator struct {
	FS  fs.FS
	URL string
}

func (m Migrator) open() (*migrate.Migrate, error) {
	src, err := iofs.New(m.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("pg: migration source: %w", err)
	}
	mg, err := migrate.NewWithSourceInstance("iofs", src, pgx5URL(m.URL))
	if err != nil {
		return nil, fmt.Errorf("pg: open migrations: %w", err)
	}
	return mg, nil
}

// pgx5URL rewrites a postgres:// URL for golang-migrate's pgx/v5 driver.
func pgx5URL(u string) string {
	for _, p := range []string{"postgres://", "postgresql://"} {
		if strings.HasPrefix(u, p) {
			return "pgx5://" + strings.TrimPrefix(u, p)
		}
	}
	return u
}

// Up applies every pending migration. It is safe to run from several
// processes at once: golang-migrate takes an advisory lock.
func (m Migrator) Up() error {
	mg, err := m.open()
	if err != nil {
		return err
	}
	defer mg.Close()
	if err := mg.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pg: migrate up: %w", err)
	}
	return nil
}

// Down rolls back n migrations (all when n <= 0).
func (m Migrator) Down(n int) error {
	mg, err := m.open()
	if err != nil {
		return err
	}
	defer mg.Close()
	if n <= 0 {
		err = mg.Down()
	} else {
		err = mg.Steps(-n)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pg: migrate down: %w", err)
	}
	return nil
}

// Latest returns the highest version in the embedded sequence.
func Latest(fsys fs.FS) (uint, error) {
	src, err := iofs.New(fsys, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v, nil
		}
		v = next
	}
}

// MigrationState is what the database says about its schema version.
type MigrationState struct {
	Version uint
	Dirty   bool
	Latest  uint
}

// Current reports whether the schema is at the embedded latest version.
func (s MigrationState) Current() bool { return !s.Dirty && s.Version == s.Latest }

// ReadMigrationState reads schema_migrations directly (no lock, no
// migrate instance): cheap enough for /readyz.
func ReadMigrationState(ctx context.Context, q Querier, fsys fs.FS) (MigrationState, error) {
	latest, err := Latest(fsys)
	if err != nil {
		return MigrationState{}, err
	}
	st := MigrationState{Latest: latest}
	var v int64
	err = q.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&v, &st.Dirty)
	if err != nil {
		if errors.Is(MapError(err), ErrNotFound) {
			return st, nil
		}
		return st, fmt.Errorf("pg: read schema_migrations: %w", err)
	}
	st.Version = uint(v)
	return st, nil
}
