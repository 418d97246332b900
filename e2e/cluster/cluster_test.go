// Package cluster_test runs the failover chapter's experiments (chapter 14,
// docs/chapters/14-failover.md) on the production topology that
// deploy/local/up.sh starts: etcd, two PostgreSQL 15 nodes under Patroni,
// HAProxy in front of the primary and of three `fencelab serve` replicas,
// two workers. The tests drive the script itself, so what they prove is
// what an operator runs.
package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

// TestMain lets the four experiments run at once even where -parallel
// defaults to 2 (GOMAXPROCS on the 2-core machine): each spends most of its
// time waiting on its own cluster's processes, not on this one's CPU.
func TestMain(m *testing.M) {
	flag.Parse()
	if p := flag.Lookup("test.parallel"); p != nil && p.Value.String() != "" {
		if n, err := strconv.Atoi(p.Value.String()); err == nil && n < 4 {
			_ = p.Value.Set("4")
		}
	}
	e2etest.Main(m)
}

// lifetime bounds every process a test starts: even if the test binary is
// killed before its cleanup runs, the cluster stops by itself. It must
// outlast the slowest test it serves, waits included: at 150 s, a loaded
// run (up.sh alone took over a minute) saw HAProxy and the replicas stopped
// by their timeout mid-test, and the load "made no progress".
const lifetime = "6m"

// cluster is one running topology.
type cluster struct {
	dir  string
	env  map[string]string
	auth *httpx.Auth
	app  *lab.App // HTTP client aimed at HAProxy's app frontend
	db   *pgxpool.Pool
}

// requirePackages fails (never skips) when a part of the topology is
// missing: the experiment cannot run without the real engines.
func requirePackages(t *testing.T) {
	t.Helper()
	var missing []string
	for bin, pkg := range map[string]string{"patroni": "patroni", "etcd": "etcd-server", "haproxy": "haproxy", "curl": "curl", "psql": "postgresql-client"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, pkg)
		}
	}
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/postgres"); err != nil {
		missing = append(missing, "postgresql-15")
	}
	if len(missing) > 0 {
		t.Fatalf("e2e/cluster needs the Debian packages %s: run ./test at the repository root (it installs them), or `apt-get install -y %s`",
			strings.Join(missing, ", "), strings.Join(missing, " "))
	}
}

// startCluster runs deploy/local/up.sh with its own ports and directory,
// and registers deploy/local/down.sh --kill --purge before anything starts,
// so every process goes away even when the test fails half-way.
func startCluster(t *testing.T, mode string, basePort int, env ...string) *cluster {
	t.Helper()
	requirePackages(t)
	bin := e2etest.Binary(t)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "fencelab-cluster-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // postgres must traverse it
	script := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command("bash", append([]string{filepath.Join(root, "deploy/local", name)}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Env = append(childEnv(), env...)
		return cmd
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"serve0", "serve1", "serve2", "worker0", "worker1"} {
				b, _ := os.ReadFile(filepath.Join(dir, "log", name+".log"))
				t.Logf("--- %s.log (tail)\n%s", name, tail(b, 3000))
			}
		}
		out, err := script("down.sh", "--dir", dir, "--kill", "--purge").CombinedOutput()
		if err != nil {
			t.Logf("down.sh: %v\n%s", err, out)
		}
	})
	started := time.Now()
	up := script("up.sh", "--"+mode, "--dir", dir, "--base-port", strconv.Itoa(basePort),
		"--lifetime", lifetime, "--bin", bin, "--no-install")
	var out bytes.Buffer
	up.Stdout, up.Stderr = &out, &out
	require.NoError(t, up.Start())
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	select {
	case err = <-done:
	case <-time.After(180 * time.Second): // a hang guard: four clusters start at once beside the rest of the suite on 2 cores
		_ = syscall.Kill(-up.Process.Pid, syscall.SIGKILL)
		err = fmt.Errorf("up.sh took longer than 180s")
	}
	if err != nil {
		for _, name := range []string{"patroni0", "patroni1", "haproxy", "migrate", "serve0"} {
			b, _ := os.ReadFile(filepath.Join(dir, "log", name+".log"))
			t.Logf("--- %s.log (tail)\n%s", name, tail(b, 2000))
		}
	}
	require.NoError(t, err, "deploy/local/up.sh:\n%s", out.String())
	t.Logf("up.sh --%s: %s", mode, time.Since(started).Round(100*time.Millisecond))

	c := &cluster{dir: dir, env: e2etest.ReadEnvFile(t, filepath.Join(dir, "env"))}
	c.auth, err = httpx.NewAuth([]byte(c.env["FENCELAB_TOKEN_SECRET"]))
	require.NoError(t, err)
	c.app = &lab.App{URL: c.env["APP_URL"], Client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	c.db = pool(t, c.env["DATABASE_URL_HAPROXY"])
	return c
}

func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "FENCELAB_") && !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// pool opens a small pool that survives a failover: every statement that
// fails on a dead connection is retried by the callers, and pgx replaces
// broken connections on the next acquire.
func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func (c *cluster) token(t *testing.T, sub string, role httpx.Role) string {
	t.Helper()
	tok, err := c.auth.Mint(sub, role, time.Hour)
	require.NoError(t, err)
	return tok
}

// primary names the node Patroni's REST API calls the primary ("" when
// neither is).
func (c *cluster) primary() (node string) {
	for _, n := range []string{"0", "1"} {
		out, err := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", c.env["NODE"+n+"_API"]+"/primary").Output()
		if err == nil && string(out) == "200" {
			return n
		}
	}
	return ""
}

// nodeDB opens a superuser pool on one node directly (not through HAProxy).
func (c *cluster) nodeDB(t *testing.T, node string) *pgxpool.Pool {
	t.Helper()
	return pool(t, c.env["NODE"+node+"_URL"])
}

// crashNode kills a node's PostgreSQL the way a power cut would: SIGKILL to
// the postmaster and every child at once (no shutdown checkpoint, no
// goodbye to the standby). Patroni sees PostgreSQL gone and, with
// primary_start_timeout 0, fails over instead of restarting it.
func (c *cluster) crashNode(t *testing.T, node string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.env["NODE"+node+"_DATA"], "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	require.NoError(t, err)
	kids, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	pids := []int{pid}
	for _, f := range strings.Fields(string(kids)) {
		if k, err := strconv.Atoi(f); err == nil {
			pids = append(pids, k)
		}
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	t.Logf("node%s: SIGKILL to the postmaster (pid %d) and its %d children", node, pid, len(pids)-1)
}

// group returns the process group up.sh recorded for name (serve0, …).
func (c *cluster) group(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "pids"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			g, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			return g
		}
	}
	t.Fatalf("no process group %q in %s/pids", name, c.dir)
	return 0
}

// assertInvariants checks the modules' invariants through HAProxy once the
// cluster answers them. A check that failed because its connection did
// (Patroni restarting or demoting a node late in a loaded run terminates
// sessions, SQLSTATE 57P01; HAProxy has no primary for a moment) says
// nothing about the data, so it is tried again for up to a minute; a check
// that ran and found rows fails at once.
func assertInvariants(t *testing.T, c *cluster, names ...string) {
	t.Helper()
	reg := program.Invariants()
	require.NotEmpty(t, reg.Select(names...), "no invariants registered for %v", names)
	deadline := time.Now().Add(time.Minute)
	for {
		results := reg.Run(context.Background(), c.db, names...)
		var lost []string
		var sb strings.Builder
		for _, r := range results {
			// pg.MapError's classification: the connection's failure,
			// not the query's (a terminated session, a failed connect).
			if r.Err != nil && errors.Is(pg.MapError(r.Err), pg.ErrUnavailable) {
				lost = append(lost, fmt.Sprintf("%s: %v", r.ID, r.Err))
			}
			if !r.Holds() {
				invariant.Format(&sb, r)
			}
		}
		if len(lost) > 0 && time.Now().Before(deadline) {
			t.Logf("invariant checks lost their connection (%d), trying again: %s", len(lost), lost[0])
			time.Sleep(time.Second)
			continue
		}
		require.Zero(t, sb.Len(), "invariants violated:\n%s", sb.String())
		return
	}
}
