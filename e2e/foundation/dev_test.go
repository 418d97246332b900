package foundation_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// The newcomer path, as a newcomer takes it: `fencelab dev` on an empty data
// directory provisions its own PostgreSQL, migrates, seeds and serves; the
// health, readiness and metrics endpoints answer and `check` passes; Ctrl-C
// stops the server and the cluster; a second `dev` reuses the data.
func TestDevProvisionsServesAndRestartsOnItsOwnData(t *testing.T) {
	t.Parallel()
	bin := e2etest.Binary(t)
	// Under a 0755 parent so the postgres OS user can reach the cluster.
	dir, err := os.MkdirTemp("", "fencelab-devtest-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	for run := 1; run <= 2; run++ {
		addr := "127.0.0.1:" + strconv.Itoa(pgtest.FreePort(t))
		cmd := exec.Command(bin, "dev")
		cmd.Env = append(e2etest.ChildEnv(""), "DATABASE_URL=", "FENCELAB_ADDR="+addr,
			"FENCELAB_DATA_DIR="+dir, "FENCELAB_ACCESS_LOG=false")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = io.Discard
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })

		base := waitForBanner(t, stdout)
		require.Equal(t, "http://"+addr, base)
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get(base + path)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode, "run %d %s", run, path)
		}
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(body), `fencelab_db_pool_max_conns{pool="main"} 12`)

		check := exec.Command(bin, "check")
		check.Env = append(e2etest.ChildEnv(""), "DATABASE_URL=", "FENCELAB_DATA_DIR="+dir) // reads <dir>/env
		out, err := check.CombinedOutput()
		require.NoError(t, err, "run %d: %s", run, out)
		require.Contains(t, string(out), " 0 violated")

		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		select {
		case err := <-exited:
			require.NoError(t, err, "dev exits cleanly on Ctrl-C")
		case <-time.After(60 * time.Second):
			t.Fatal("dev did not stop on Ctrl-C")
		}
		pid := postmasterPID(t, dir)
		require.Zero(t, pid, "the cluster stopped with dev (postmaster.pid removed)")
	}
}

// waitForBanner reads dev's stdout until the "running at" line.
func waitForBanner(t *testing.T, r io.Reader) string {
	t.Helper()
	re := regexp.MustCompile(`Fencelab is running at (\S+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case base := <-found:
		return base
	case <-time.After(90 * time.Second):
		t.Fatal("dev did not print its banner")
	}
	return ""
}

// postmasterPID is the pid recorded by a running cluster, 0 when none.
func postmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "pg", "postmaster.pid"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}
