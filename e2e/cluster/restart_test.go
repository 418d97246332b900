package cluster_test

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// A serve replica killed with SIGKILL (a crash, an OOM kill) is started
// again by its supervisor (deploy/local/supervise.sh), the restart is
// logged, and HAProxy routes to it once more: the topology does not
// shrink for good. Every wait is a poll with a deadline on the state it
// waits for, never a sleep. It runs on TestKilledReplicaRetriesLandOnce's
// cluster, last (it ends with down.sh); supervised names the processes
// whose supervisors are still alive then.
func aKilledReplicaComesBack(t *testing.T, c *cluster, supervised []string) {
	old := c.replicaPID(t, "serve0")
	killed := time.Now()
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
	t.Logf("serve0: SIGKILL to pid %d", old)

	// The supervisor starts a new process, which answers on its own port.
	var pid int
	require.Eventually(t, func() bool {
		pid = c.currentPID("serve0")
		return pid != 0 && pid != old && syscall.Kill(pid, 0) == nil && c.status(c.env["SERVE0_URL"]+"/readyz") == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "serve0 must be restarted and ready")
	t.Logf("serve0: back as pid %d, ready %v after the kill", pid, time.Since(killed).Round(10*time.Millisecond))
	b, err := os.ReadFile(c.env["SUPERVISOR_LOG"])
	require.NoError(t, err)
	require.Regexp(t, `serve0: pid `+strconv.Itoa(old)+` exited with status \d+ after \d+s; restart #1 in \d+s`, string(b))
	require.Contains(t, string(b), "serve0: restart #1: pid "+strconv.Itoa(pid))

	// HAProxy marks it up again and sends it requests: its session count
	// grows while requests go through the app frontend.
	require.Eventually(t, func() bool { return c.haproxyServer(t, "serve0")["status"] == "UP" },
		30*time.Second, 100*time.Millisecond, "HAProxy must mark serve0 up again")
	before, err := strconv.Atoi(c.haproxyServer(t, "serve0")["stot"])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		if c.status(c.env["APP_URL"]+"/readyz") != http.StatusOK {
			return false
		}
		n, err := strconv.Atoi(c.haproxyServer(t, "serve0")["stot"])
		return err == nil && n > before
	}, 30*time.Second, 50*time.Millisecond, "requests through HAProxy must reach serve0 again")
	t.Logf("serve0: serving through HAProxy %v after the kill", time.Since(killed).Round(10*time.Millisecond))

	// down.sh signals each supervisor first: the replicas stop and none is
	// restarted on the way down.
	down := exec.Command("bash", filepath.Join("..", "..", "deploy", "local", "down.sh"), "--dir", c.dir)
	down.Env = childEnv()
	begin := time.Now()
	out, err := down.CombinedOutput()
	require.NoError(t, err, "down.sh:\n%s", out)
	t.Logf("down.sh: %v", time.Since(begin).Round(10*time.Millisecond))
	b, err = os.ReadFile(c.env["SUPERVISOR_LOG"])
	require.NoError(t, err)
	log := string(b)
	for _, name := range supervised {
		require.Contains(t, log, name+": stopped", "down.sh stops %s through its supervisor", name)
	}
	require.Equal(t, 1, strings.Count(log, "restart #1: pid"), "the kill above is the only restart:\n%s", log)
	require.Equal(t, 0, c.status(c.env["SERVE0_URL"]+"/healthz"), "serve0 is down after down.sh")
}

// currentPID is the pid in name's pid file now, 0 while there is none
// (between a death and its restart).
func (c *cluster) currentPID(name string) int {
	b, err := os.ReadFile(filepath.Join(c.dir, "run", name+".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// replicaPID is the pid of the process the supervisor runs for name now.
func (c *cluster) replicaPID(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "run", name+".pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// status is the HTTP status of GET url, 0 when nothing answers.
func (c *cluster) status(url string) int {
	cl := http.Client{Timeout: 2 * time.Second}
	r, err := cl.Get(url)
	if err != nil {
		return 0
	}
	r.Body.Close()
	return r.StatusCode
}

// haproxyServer is one server's row of HAProxy's CSV statistics in the app
// frontend, by column name (status, stot, …).
func (c *cluster) haproxyServer(t *testing.T, name string) map[string]string {
	t.Helper()
	cl := http.Client{Timeout: 2 * time.Second}
	r, err := cl.Get(c.env["HAPROXY_STATS"] + ";csv")
	require.NoError(t, err)
	defer r.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(r.Body)
	require.NoError(t, err)
	rd := csv.NewReader(strings.NewReader(strings.TrimPrefix(buf.String(), "# ")))
	rd.FieldsPerRecord = -1
	rows, err := rd.ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	for _, row := range rows[1:] {
		if len(row) > 1 && row[0] == "fencelab_http" && row[1] == name {
			m := map[string]string{}
			for i, col := range rows[0] {
				if i < len(row) {
					m[col] = row[i]
				}
			}
			return m
		}
	}
	t.Fatalf("no server %s in HAProxy's statistics", name)
	return nil
}

// envFileSourcesWhole: the cluster's env file is sh-quoted, so sourcing it
// gives the whole DATABASE_URL (with its &), and `fencelab check` works
// after sourcing it from a directory without .fencelab.
func envFileSourcesWhole(t *testing.T, c *cluster) {
	envFile := filepath.Join(c.dir, "env")
	require.Contains(t, c.env["DATABASE_URL"], "&", "the URL holds the & that once broke sourcing")
	cmd := exec.Command("sh", "-c", `set -a; . "$1"; set +a; printf '%s\n%s\n' "$DATABASE_URL" "${FENCELAB_DATA_DIR-unset}"`, "sh", envFile)
	cmd.Env = childEnv()
	out, err := cmd.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Equal(t, []string{c.env["DATABASE_URL"], "unset"}, lines,
		"sourced, DATABASE_URL is the whole URL and FENCELAB_DATA_DIR stays unset (a later dev keeps its own)")

	// From a directory without .fencelab, as an operator would.
	check := exec.Command("sh", "-c", `set -a; . "$1"; set +a; exec "$2" check`, "sh", envFile, e2etest.Binary(t))
	check.Env, check.Dir = childEnv(), t.TempDir()
	out, err = check.CombinedOutput()
	require.NoError(t, err, "fencelab check after sourcing DIR/env:\n%s", out)
	require.Contains(t, string(out), " 0 violated")
}
