package foundation_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	dir := e2etest.ScratchDir(t, "fencelab-devtest-")

	for run := 1; run <= 2; run++ {
		addr := "127.0.0.1:" + strconv.Itoa(pgtest.FreePort(t))
		dev := e2etest.StartChild(t, fmt.Sprintf("dev (run %d)", run), append(e2etest.ChildEnv(""), "DATABASE_URL=",
			"FENCELAB_ADDR="+addr, "FENCELAB_DATA_DIR="+dir, "FENCELAB_ACCESS_LOG=false"), "dev")
		base := waitForBanner(t, dev)
		require.Equal(t, "http://"+addr, base)
		resp, err := http.Get(base + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "run %d /healthz", run)
		// Readiness is a probe: just after start-up, while the background
		// tasks open their connections, it may answer 503 busy for a
		// moment on a loaded machine. It must come to 200 on its own.
		var ready int
		probes := 0
		require.Eventually(t, func() bool {
			probes++
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			ready = resp.StatusCode
			return ready == 200
		}, 30*time.Second, 200*time.Millisecond, "run %d: /readyz must answer 200 (last %d)", run, ready)
		if probes > 1 {
			t.Logf("run %d: /readyz answered 200 at probe %d", run, probes)
		}
		resp, err = http.Get(base + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(body), `fencelab_db_pool_max_conns{pool="main"} 12`)

		code, out := runBin(t, append(e2etest.ChildEnv(""), "DATABASE_URL=", "FENCELAB_DATA_DIR="+dir), "", "check") // reads <dir>/env
		require.Zero(t, code, "run %d: %s", run, out)
		require.Contains(t, out, " 0 violated")

		require.NoError(t, dev.Interrupt(t, 60*time.Second), "dev exits cleanly on Ctrl-C")
		pid := postmasterPID(t, dir)
		require.Zero(t, pid, "the cluster stopped with dev (postmaster.pid removed)")
	}
}

var bannerRE = regexp.MustCompile(`Fencelab is running at (\S+)`)

// waitForBanner reads dev's stdout until the "running at" line (a cluster
// to provision first on a loaded machine: 90 s) and returns its URL.
func waitForBanner(t *testing.T, dev *e2etest.Child) string {
	t.Helper()
	return dev.SkipToMatch(t, bannerRE, 90*time.Second)[1]
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
