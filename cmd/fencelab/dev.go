package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
)

// devPort is the preferred port of the dev cluster, so its URL stays the
// same across runs when the port is free.
const devPort = 54329

func runDev(args []string) error {
	cfg := app.Defaults()
	fs := newFlags("dev", "dev [flags]")
	cfg.Bind(fs)
	if err := fs.Parse(args); err != nil {
		return errUsage
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
	envFile := filepath.Join(cfg.DataDir, "env")
	if cfg.DatabaseURL != "" && cfg.DatabaseURL == readEnvFile(envFile)["DATABASE_URL"] {
		cfg.DatabaseURL = "" // our own cluster's URL from an earlier run: start it again
	}

	pgDir, err := devClusterDir(cfg.DataDir)
	if err != nil {
		return err
	}
	logPath := filepath.Join(filepath.Dir(pgDir), "postgres.log")
	if cfg.DatabaseURL == "" {
		fmt.Printf("starting PostgreSQL (data in %s, log in %s) …\n", pgDir, logPath)
	}
	srv, err := pgserver.Provision(ctx, cfg.DatabaseURL, pgserver.Options{DataDir: pgDir, PreferredPort: devPort})
	if err != nil {
		return err
	}
	defer func() {
		if srv.Strategy != pgserver.FromURL {
			fmt.Println("stopping PostgreSQL …")
		}
		_ = srv.Stop("fast")
	}()
	if srv.Strategy != pgserver.FromURL {
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
	env := fmt.Sprintf("# written by `fencelab dev`; check, token, migrate and bench read it\nDATABASE_URL=%s\nFENCELAB_TOKEN_SECRET=%s\n", cfg.DatabaseURL, cfg.TokenSecret)
	if err := os.WriteFile(envFile, []byte(env), 0o600); err != nil {
		return err
	}

	p, err := openProcess(ctx, cfg, "dev", true, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Seed(ctx); err != nil {
		return err
	}
	log.Debug("dev ready", "strategy", srv.Strategy)
	return serveUntilDone(ctx, p, func(addr string) { printBanner(p, addr, envFile) })
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
Fencelab is running at %[1]s   (Ctrl-C stops it and its PostgreSQL)
  modules:  %[2]s
  database: %[3]s
  health:   %[1]s/healthz   ready: %[1]s/readyz   metrics: %[1]s/metrics

Demo tokens (24 h):
  export ADMIN=%[4]s
  export USER42=%[5]s
  export SVC=%[6]s

Try:
  curl -s %[1]s/readyz
  curl -s %[1]s/metrics | grep fencelab_db_pool
  go run ./cmd/fencelab check          # every SQL invariant against this database
  go run ./cmd/fencelab token --sub user-0042
%[7]s
(DATABASE_URL and the token secret are in %[8]s.)
`, base, strings.Join(mods, ", "), p.Deps.Config.DatabaseURL, admin, user, svc, demoCurls(base), envFile)
}

// demoCurls lists one example request per module (BASE is the server URL);
// modules add a line each.
func demoCurls(base string) string {
	lines := []string{
		`curl -s -H "Authorization: Bearer $USER42" BASE/reports/$(date +%F)   # today's report: content, fence, writer`,
		`curl -s -XPOST BASE/workflows -H "Authorization: Bearer $ADMIN" -H "Content-Type: application/json" -d '{"business_key":"wf-0042"}'`,
		`curl -s BASE/jobs/1 -H "Authorization: Bearer $ADMIN"   # the chapter-14 workflow and its fenced history`,
		`curl -s -H "Authorization: Bearer $ADMIN" BASE/outbox/consumers   # outbox positions and lag`,
		`curl -s -XPOST BASE/points/accounts/acct-0042/debits -H "Authorization: Bearer $USER42" -H "Idempotency-Key: prize-17-1" -H "Content-Type: application/json" -d '{"amount":30,"reason":"prize-17"}'   # points: debit the seeded account (retry: the same answer)`,
		`curl -s -XPOST BASE/flashsale/reservations -H "Authorization: Bearer $USER42" -H "Content-Type: application/json" -d '{"sku":"sku-lab-01","request_key":"demo-0042"}'   # hold 1 of 40 units`,
		`curl -s -XPOST BASE/flashsale/orders -H "Authorization: Bearer $USER42" -H "Content-Type: application/json" -d '{"reservation_id":1}'   # order the hold; then POST BASE/flashsale/orders/1/pay and, 2 s later, GET BASE/flashsale/orders/1 (PAID)`,
		`curl -s -H "Authorization: Bearer $USER42" BASE/social/users/user-0043/posts   # social: posts of a private account user-0042 follows`,
		`curl -s -H "Authorization: Bearer $USER42" 'BASE/social/feed?limit=2'   # social: user-0042's home feed (strategy=push|pull|hybrid; pass "next" as cursor=)`,
		`curl -s -H "Authorization: Bearer $USER42" BASE/social/items/1/likes   # likes: the count, its pending events and error bound (POST …/like, …/unlike)`,
		`curl -s -XPOST BASE/notify/events -H "Authorization: Bearer $SVC" -H "Content-Type: application/json" -d '{"user_id":"user-0042","event_key":"order:ord-1001:shipped","template":"order_shipped"}'   # then GET BASE/notify/notifications/1`,
		`curl -si BASE/s/demo   # shortlink: 302 to the seeded demo link`,
		`curl -s -H "Authorization: Bearer $USER42" -H 'Content-Type: application/json' BASE/upload/sessions -d "{\"total_size\":5,\"chunk_count\":1,\"sha256\":\"$(printf hello | sha256sum | cut -c1-64)\"}"   # upload: a session (README: Chunked upload)`,
	}
	return strings.ReplaceAll("  "+strings.Join(lines, "\n  ")+"\n", "BASE", base)
}
