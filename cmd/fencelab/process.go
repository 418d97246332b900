package main

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/program"
)

// openProcess builds the deployable (app.Build over program.Modules),
// optionally migrating first: serve, worker and dev share it.
func openProcess(ctx context.Context, cfg app.Config, role string, migrate bool, fs *faults.Set) (*app.Process, error) {
	// The first errors a newcomer meets say what to do next.
	if cfg.DatabaseURL == "" {
		return nil, errNoDatabase
	}
	if cfg.TokenSecret == "" {
		return nil, errNoSecret
	}
	// The console's lab cluster is made on its first run and removed by the
	// console's task when the process stops.
	p, err := app.Build(ctx, cfg, program.Modules(program.NewRunner(cfg.Logger())), app.BuildOptions{Role: role, Migrate: migrate, Faults: fs})
	if err != nil {
		return nil, connectHint(err, cfg.DatabaseURL)
	}
	if !migrate {
		if err := requireCurrentSchema(ctx, p.Deps.Pool); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// loadLocalEnv fills unset variables from .fencelab/env (written by dev),
// so `fencelab check` and `fencelab token` work right after `dev`.
func loadLocalEnv(dataDir string) {
	if dataDir == "" {
		dataDir = app.Env("FENCELAB_DATA_DIR", ".fencelab")
	}
	f, err := os.Open(filepath.Join(dataDir, "env"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if cur, set := os.LookupEnv(k); !set || cur == "" {
			_ = os.Setenv(k, strings.Trim(v, `'"`))
		}
	}
}

func logStart(log *slog.Logger, what string, cfg app.Config) {
	log.Info(what, "addr", cfg.Addr, "db_max_conns", cfg.MaxConns, "workers", cfg.Workers)
}
