package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/migrations"
)

// devPort is the preferred port of the dev cluster, so its URL stays the
// same across runs when the port is free.
const devPort = 54329

func runDev(args []string) error {
	cfg := app.Defaults()
	fs := newFlags("dev", "dev [flags]")
	cfg.Bind(fs)
	reset := fs.Bool("reset", false, "drop and recreate the dev database and its blobs first (the demo data comes back; your changes go)")
	noInstall := fs.Bool("no-install", false, "when no PostgreSQL is found (no DATABASE_URL, no server binaries, no Docker engine), print the apt command instead of running it (dev installs the server itself on Debian/Ubuntu as root or with password-less sudo)")
	noWorkers := fs.Bool("no-workers", false, "run no claim-engine jobs in this process (same as --workers 0): a separate `fencelab worker` then claims every job, e.g. one paused with --pause-at")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *noWorkers {
		cfg.Workers = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := cfg.Logger()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return err
	}
	// The data directory is Fencelab's own (its secrets are 0600 files): let
	// the postgres user through it, whatever made it first, so the cluster
	// can live in <data-dir>/pg.
	if os.Geteuid() == 0 {
		_ = os.Chmod(cfg.DataDir, 0o755)
	}
	// One dev per data directory, checked before anything starts: a second
	// one would otherwise fail deep inside PostgreSQL's start-up.
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	// The HTTP port is checked before provisioning, not after a minute of
	// work; the listener is kept and served on.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (%v): another program has that port; "+
			"start dev with another one, e.g. --addr 127.0.0.1:%d (or set FENCELAB_ADDR)", cfg.Addr, errors.Unwrap(err), nextPort(cfg.Addr))
	}
	defer ln.Close()

	envFile := filepath.Join(cfg.DataDir, "env")
	if cfg.DatabaseURL != "" && cfg.DatabaseURL == readEnvFile(envFile)["DATABASE_URL"] {
		cfg.DatabaseURL = "" // our own cluster's URL from an earlier run: start it again
	}
	if *reset && cfg.DatabaseURL != "" {
		return errors.New("--reset drops dev's own database; with DATABASE_URL set, reset that database yourself")
	}

	pgDir, err := devClusterDir(cfg.DataDir)
	if err != nil {
		return err
	}
	logPath := filepath.Join(filepath.Dir(pgDir), "postgres.log")
	fmt.Printf("fencelab dev: data in %s", cfg.DataDir)
	if cfg.DatabaseURL == "" {
		fmt.Printf(" (PostgreSQL cluster in %s, its log in %s)", pgDir, logPath)
	}
	fmt.Println()
	opts := pgserver.Options{DataDir: pgDir, PreferredPort: devPort}
	portFile := filepath.Join(cfg.DataDir, "pg-port")
	if cfg.DatabaseURL == "" {
		if opts.Port, err = savedPort(portFile); err != nil {
			return err
		}
	}
	if cfg.DatabaseURL == "" {
		host := func() pgserver.Host { return pgserver.DetectHost(ctx, *noInstall) }
		if err := ensureServer(ctx, host, pgserver.ExecRunner); err != nil {
			return err
		}
	}
	var srv *pgserver.Server
	err = step("provisioning PostgreSQL", func() (string, error) {
		var err error
		if srv, err = pgserver.Provision(ctx, cfg.DatabaseURL, opts); err != nil {
			return "", err
		}
		if srv.Strategy == pgserver.FromURL {
			return "DATABASE_URL given: using it", nil
		}
		return fmt.Sprintf("%s on port %d", srv.Strategy, srv.Port), nil
	})
	if err != nil {
		return err
	}
	defer func() {
		if srv.Strategy != pgserver.FromURL {
			fmt.Println("stopping PostgreSQL …")
		}
		_ = srv.Stop("fast")
	}()
	if srv.Strategy == pgserver.Local {
		// The port stays the same across runs, so an exported DATABASE_URL
		// (eval "$(fencelab env)") does not go stale.
		if err := os.WriteFile(portFile, []byte(strconv.Itoa(srv.Port)+"\n"), 0o644); err != nil {
			return err
		}
	}
	if srv.Strategy != pgserver.FromURL {
		if *reset {
			err := step("resetting the dev database", func() (string, error) {
				return "dropped database fencelab and the upload blobs", resetDev(ctx, srv.URL("postgres"), "fencelab", cfg)
			})
			if err != nil {
				return err
			}
		}
		if err := ensureDatabase(ctx, srv.URL("postgres"), "fencelab"); err != nil {
			return err
		}
		cfg.DatabaseURL = srv.URL("fencelab")
	}

	if cfg.TokenSecret == "" {
		if cfg.TokenSecret, err = devSecret(cfg.DataDir); err != nil {
			return err
		}
	}
	env := fmt.Sprintf("# written by `fencelab dev`; check, token, migrate, psql and env read it\nDATABASE_URL=%s\nFENCELAB_TOKEN_SECRET=%s\n", cfg.DatabaseURL, cfg.TokenSecret)
	if err := os.WriteFile(envFile, []byte(env), 0o600); err != nil {
		return err
	}

	err = step("migrating", func() (string, error) {
		if err := (pg.Migrator{FS: migrations.FS, URL: cfg.DatabaseURL}).Up(); err != nil {
			return "", err
		}
		latest, err := pg.Latest(migrations.FS)
		return fmt.Sprintf("schema version %d", latest), err
	})
	if err != nil {
		return err
	}
	p, err := openProcess(ctx, cfg, "dev", false, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	var skipped []string
	_ = step("seeding demo data", func() (string, error) {
		for _, m := range p.Mods {
			if m.Seed == nil {
				continue
			}
			// A seed restores only what is missing; one that still fails
			// (on state a reader made) is reported, never fatal: the
			// reader's data is worth more than the demo's.
			if err := m.Seed(ctx); err != nil {
				skipped = append(skipped, fmt.Sprintf("%s (%v)", m.Name, err))
			}
		}
		if len(skipped) > 0 {
			return fmt.Sprintf("skipped %s; your changes are kept (`fencelab dev --reset` restores the demo data)", strings.Join(skipped, ", ")), nil
		}
		return "", nil
	})
	log.Debug("dev ready", "strategy", srv.Strategy)
	start := time.Now()
	fmt.Printf("  %-28s", "serving …")
	return serveOn(ctx, p, ln, func(addr string) {
		fmt.Printf(" %s (on %s)\n", since(start), addr)
		printBanner(p, addr, envFile)
	})
}

// ensureServer installs the PostgreSQL server when none is found, so that
// a newcomer's first `dev` on a fresh Debian or Ubuntu machine serves
// rather than stops: as root (or with password-less sudo) it runs apt-get
// as one start-up step; with --no-install, or with no way to run it, it
// returns the exact command (exit 1). A Docker engine or a given URL
// counts as found: nothing is installed then.
func ensureServer(ctx context.Context, host func() pgserver.Host, run pgserver.Runner) error {
	if _, err := pgserver.Choose(pgserver.DetectEnv(ctx, "")); err == nil {
		return nil
	}
	plan := pgserver.DecideInstall(host())
	if len(plan.Run) == 0 {
		return pgserver.Install(ctx, plan, run) // the error with the command
	}
	return step("installing PostgreSQL (apt)", func() (string, error) {
		if err := pgserver.Install(ctx, plan, run); err != nil {
			return "", err
		}
		if pgserver.FindBinDir() == "" {
			return "", fmt.Errorf("apt-get installed %s, but initdb and postgres are still not on PATH or under %s/*/bin", pgserver.Package, pgserver.SearchRoot())
		}
		return "apt-get install " + pgserver.Package, nil
	})
}

// step runs one start-up step and prints its name, duration and note.
func step(name string, fn func() (string, error)) error {
	fmt.Printf("  %-28s", name+" …")
	start := time.Now()
	note, err := fn()
	if err != nil {
		fmt.Printf(" failed after %s\n", since(start))
		return err
	}
	if note != "" {
		note = " (" + note + ")"
	}
	fmt.Printf(" %s%s\n", since(start), note)
	return nil
}

func since(t time.Time) time.Duration {
	d := time.Since(t)
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// lockDataDir takes an exclusive lock on <dir>/dev.lock for as long as dev
// runs (the kernel drops it if dev dies), naming the holder's pid when it
// is taken.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, "dev.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another `fencelab dev` (pid %s) is running with the data directory %s: "+
			"use that one (its banner has the URLs), stop it with Ctrl-C in its terminal, "+
			"or give this one its own --data-dir", strings.TrimSpace(string(b)), dir)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { _ = f.Truncate(0); f.Close() }, nil
}

// savedPort is the dev cluster's port from an earlier run (0: none yet). A
// port another program took since is refused with what to do, rather than
// silently changing DATABASE_URL.
func savedPort(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || port < 1 || port > 65535 {
		return 0, nil // unreadable: pick again
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("port %d, where this dev cluster always listens (saved in %s so that DATABASE_URL stays the same), "+
			"is taken by another program: stop it, or delete %s to let dev choose a new port (then run `eval \"$(fencelab env)\"` again)",
			port, path, path)
	}
	l.Close()
	return port, nil
}

// nextPort suggests the port after addr's.
func nextPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if n, err2 := strconv.Atoi(p); err == nil && err2 == nil && n > 0 && n < 65535 {
		return n + 1
	}
	return 8081
}

// resetDev drops the dev database (closing its connections) and removes
// the upload blob store bound to it; ensureDatabase then creates it empty
// and the seed restores the demo data.
func resetDev(ctx context.Context, adminURL, name string, cfg app.Config) error {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return pg.MapError(err)
	}
	dir, ok := cfg.Lookup("FENCELAB_UPLOAD_DIR")
	if !ok {
		dir = filepath.Join(cfg.DataDir, "upload")
	}
	return os.RemoveAll(dir)
}

// devClusterDir is <data-dir>/pg, unless we run as root and the postgres
// user cannot reach it (a checkout under /root): then a stable directory
// under /var/tmp named after the checkout.
func devClusterDir(dataDir string) (string, error) {
	abs, err := filepath.Abs(filepath.Join(dataDir, "pg"))
	if err != nil {
		return "", err
	}
	if os.Geteuid() != 0 || othersCanReach(filepath.Dir(abs)) {
		return abs, nil
	}
	sum := sha256.Sum256([]byte(abs))
	alt := filepath.Join("/var/tmp", "fencelab-dev-"+hex.EncodeToString(sum[:4]))
	if err := os.MkdirAll(alt, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(alt, 0o755); err != nil {
		return "", err
	}
	return filepath.Join(alt, "pg"), nil
}

func othersCanReach(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return pg.MapError(err)
}

// devSecret returns the dev token secret, generating it once.
func devSecret(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "secret")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= httpx.MinSecretLen {
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	s := hex.EncodeToString(buf)
	return s, os.WriteFile(path, []byte(s+"\n"), 0o600)
}

func readEnvFile(path string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

func printBanner(p *app.Process, addr, envFile string) {
	base := "http://" + addr
	mint := func(sub string, role httpx.Role) string {
		t, _ := p.Deps.Auth.Mint(sub, role, 24*time.Hour)
		return t
	}
	admin, user, svc := mint("admin-0001", httpx.RoleAdmin), mint("user-0042", httpx.RoleUser), mint("svc-0001", httpx.RoleService)
	var mods []string
	for _, m := range p.Mods {
		mods = append(mods, m.Name)
	}
	fmt.Printf(`
Console:  %[1]s/   (sign in with the ADMIN token below)
Fencelab is running at %[1]s   (Ctrl-C stops it and its PostgreSQL)
  modules:  %[2]s
  database: %[3]s
  health:   %[1]s/healthz   ready: %[1]s/readyz   metrics: %[1]s/metrics

Demo tokens (24 h) for user-0042, admin-0001 and svc-0001; in another terminal:
  eval "$(go run ./cmd/fencelab env)"     # or copy these:
  export ADMIN=%[4]s
  export USER42=%[5]s
  export SVC=%[6]s

Try (docs/chapters/ has one page per chapter; its examples run in order):
  curl -s %[1]s/readyz
  go run ./cmd/fencelab check          # every SQL invariant against this database
  go run ./cmd/fencelab psql           # psql on this database
%[7]s
(DATABASE_URL and the token secret are in %[8]s; `+"`fencelab dev --reset`"+` starts the data over.)
`, base, strings.Join(mods, ", "), p.Deps.Config.DatabaseURL, admin, user, svc, demoCurls(base), envFile)
}

// demoCurls lists one example request per module (BASE is the server URL);
// modules add a line each.
func demoCurls(base string) string {
	lines := []string{
		`curl -s -H "Authorization: Bearer $USER42" BASE/reports/$(date -u +%F)   # 1 lease: today's report, its fence and writer`,
		`curl -s -XPOST BASE/workflows -H "Authorization: Bearer $ADMIN" -H "Content-Type: application/json" -d '{"business_key":"wf-0042"}'   # 2 claim: then GET BASE/jobs/<job_id>`,
		`curl -s -H "Authorization: Bearer $ADMIN" BASE/outbox/consumers   # 4 outbox: positions and lag`,
		`curl -s -H "Authorization: Bearer $USER42" BASE/points/accounts/acct-0042   # 5 points: the seeded account`,
		`curl -s BASE/flashsale/skus/sku-lab-01   # 6 reservations: 40 units`,
		`curl -s -H "Authorization: Bearer $USER42" 'BASE/social/feed?limit=2'   # 9 feed: user-0042's home feed`,
		`curl -s -H "Authorization: Bearer $USER42" BASE/social/items/1/likes   # 10 likes: the count and its error bound`,
		`curl -s -o /dev/null -w '%{http_code} %{redirect_url}\n' BASE/s/demo   # 12 shortlink: 302 to the seeded demo link`,
	}
	return strings.ReplaceAll("  "+strings.Join(lines, "\n  ")+"\n", "BASE", base)
}
