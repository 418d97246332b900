package main

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
	"github.com/fencelab/fencelab/services/labenv"
)

// process is what serve, worker and dev share: config, pool, deps, modules.
type process struct {
	deps      app.Deps
	mods      []app.Module
	closeMods func()
}

func (p *process) close() { p.closeMods(); p.deps.Pool.Close() }

// openProcess connects, optionally migrates, and builds every module.
func openProcess(ctx context.Context, cfg app.Config, role string, migrate bool, fs *faults.Set) (*process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set (or run `fencelab dev`, which provisions one)")
	}
	log := cfg.Logger()
	if migrate {
		if err := (pg.Migrator{FS: migrations.FS, URL: cfg.DatabaseURL}).Up(); err != nil {
			return nil, err
		}
	}
	auth, err := httpx.NewAuth([]byte(cfg.TokenSecret))
	if err != nil {
		return nil, err
	}
	pool, err := pg.Connect(ctx, cfg.DatabaseURL, pg.PoolOptions{MaxConns: int32(cfg.MaxConns), ApplicationName: "fencelab-" + role})
	if err != nil {
		return nil, err
	}
	d := app.Deps{Config: cfg, Pool: pool, Log: log, Metrics: app.NewMetrics(pool), Auth: auth, Faults: fs}
	d.Jobs = app.NewJobs(pool, log, d.Metrics, fs)
	mods, closeMods, err := labenv.Modules(d)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &process{deps: d, mods: mods, closeMods: closeMods}, nil
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
