// Package setup is what every `fencelab bench` does before it measures:
// the --database-url and --cpuprofile flags, the CPU profile, and a
// migrated PostgreSQL — the one given, or a fresh local cluster with
// durable defaults. One copy, so every bench measures against the same
// kind of database and says so in the same words.
package setup

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

// Flags are the flags every bench shares.
type Flags struct {
	DatabaseURL string
	CPUProfile  string
}

// Add registers --database-url and, when profiled says what the profile
// covers ("the whole run", "the drain"), --cpuprofile.
func Add(fs *flag.FlagSet, profiled string) *Flags {
	f := &Flags{}
	fs.StringVar(&f.DatabaseURL, "database-url", "", "PostgreSQL to use, only when given (never DATABASE_URL: the dev database stays untouched); "+
		"empty: a fresh local cluster with durable defaults (fsync on), removed afterwards")
	if profiled != "" {
		fs.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of "+profiled+" to this file")
	}
	return f
}

// AddServer registers --database-url for a bench that makes scratch
// databases of its own on a server (Server, Scratch) instead of measuring
// one migrated database.
func AddServer(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.DatabaseURL, "database-url", "", "PostgreSQL server to make the bench's scratch databases on, only when given "+
		"(never DATABASE_URL: the dev database stays untouched; its role must create databases; its other databases are left alone); "+
		"empty: a fresh local cluster with durable defaults (fsync on), removed afterwards")
	return f
}

// Profile starts the CPU profile --cpuprofile asks for (nothing when it
// is empty); stop ends it and writes the file.
func (f *Flags) Profile() (stop func(), err error) {
	if f.CPUProfile == "" {
		return func() {}, nil
	}
	out, err := os.Create(f.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = out.Close()
	}, nil
}

// Server provisions the server — --database-url, or a fresh local cluster
// with durable defaults, never Ephemeral: a bench's figures are for fsync
// on, as in production — and says which on stdout when it starts one. The
// caller closes it (which removes a cluster it started).
func (f *Flags) Server(ctx context.Context) (*pgserver.Server, error) {
	if f.DatabaseURL == "" {
		fmt.Println("starting a fresh local PostgreSQL cluster (durable defaults: fsync on) …")
	}
	return pgserver.Provision(ctx, f.DatabaseURL, pgserver.Options{})
}

// Database provisions the database to measure — --database-url, or a
// fresh local cluster with durable defaults, never Ephemeral: a bench's
// figures are for fsync on, as in production — and migrates it. The
// caller closes srv (which removes a cluster it started).
func (f *Flags) Database(ctx context.Context) (srv *pgserver.Server, url string, err error) {
	srv, err = f.Server(ctx)
	if err != nil {
		return nil, "", err
	}
	url = srv.URL("")
	if err := (pg.Migrator{FS: migrations.FS, URL: url}).Up(); err != nil {
		_ = srv.Close()
		return nil, "", err
	}
	return srv, url, nil
}

// Run is a started bench's database and profile.
type Run struct {
	Server      *pgserver.Server
	URL         string
	stopProfile func()
}

// Start is Profile then Database, for a bench that profiles the whole
// run; Close ends both.
func (f *Flags) Start(ctx context.Context) (*Run, error) {
	stop, err := f.Profile()
	if err != nil {
		return nil, err
	}
	srv, url, err := f.Database(ctx)
	if err != nil {
		stop()
		return nil, err
	}
	return &Run{Server: srv, URL: url, stopProfile: stop}, nil
}

// Close stops the profile and closes the server (removing a cluster
// Start made).
func (r *Run) Close() {
	_ = r.Server.Close()
	r.stopProfile()
}
