package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg/pgserver"
)

// runEnv is `fencelab env`: the dev database URL, the token secret and
// three demo tokens as shell exports, for eval "$(fencelab env)". The
// values come from the env file dev writes; the cluster keeps its port
// across runs, so they stay valid until `dev --reset` or a new secret.
func runEnv(args []string) error {
	fs := newFlags("env", "env [--data-dir DIR] [--ttl 24h]")
	dataDir := fs.String("data-dir", app.Env("FENCELAB_DATA_DIR", ".fencelab"), "the data directory dev uses (FENCELAB_DATA_DIR)")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity of the demo tokens")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	path := filepath.Join(*dataDir, "env")
	env := readEnvFile(path)
	if env["DATABASE_URL"] == "" || env["FENCELAB_TOKEN_SECRET"] == "" {
		return fmt.Errorf("no dev settings in %s: run `go run ./cmd/fencelab dev` in this directory first, then `eval \"$(go run ./cmd/fencelab env)\"`", path)
	}
	auth, err := httpx.NewAuth([]byte(env["FENCELAB_TOKEN_SECRET"]))
	if err != nil {
		return err
	}
	vars := [][2]string{{"DATABASE_URL", env["DATABASE_URL"]}, {"FENCELAB_TOKEN_SECRET", env["FENCELAB_TOKEN_SECRET"]}}
	for _, t := range []struct {
		name, sub string
		role      httpx.Role
	}{{"USER42", "user-0042", httpx.RoleUser}, {"ADMIN", "admin-0001", httpx.RoleAdmin}, {"SVC", "svc-0001", httpx.RoleService}} {
		tok, err := auth.Mint(t.sub, t.role, *ttl)
		if err != nil {
			return err
		}
		vars = append(vars, [2]string{t.name, tok})
	}
	fmt.Println("# the dev database, its token secret and demo tokens (user-0042, admin-0001, svc-0001); use: eval \"$(fencelab env)\"")
	for _, v := range vars {
		fmt.Printf("export %s=%s\n", v[0], shellQuote(v[1]))
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runPsql is `fencelab psql [psql args]`: psql on the dev database (or
// DATABASE_URL), so a reader never needs to export anything first.
func runPsql(args []string) error {
	loadLocalEnv("")
	url := app.Env("DATABASE_URL", "")
	if url == "" {
		return errNoDatabase
	}
	bin, err := exec.LookPath("psql")
	if err != nil {
		if dir := pgserver.FindBinDir(); dir != "" {
			if _, err2 := os.Stat(filepath.Join(dir, "psql")); err2 == nil {
				bin, err = filepath.Join(dir, "psql"), nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("psql is not installed: apt-get install postgresql-client (or connect any client to %s)", url)
	}
	return syscall.Exec(bin, append([]string{"psql", url}, args...), os.Environ())
}
