package foundation_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// runBin runs the binary to completion and returns its exit code and
// combined output.
func runBin(t *testing.T, env []string, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(e2etest.Binary(t), args...)
	cmd.Env, cmd.Dir = env, dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return 0, out.String()
}

// serve and worker refuse a schema behind the binary, naming the command
// that fixes it, instead of answering 500 to every request.
func TestServeAndWorkerRefuseASchemaBehindTheBinary(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	env := e2etest.ChildEnv(a.DBURL, "FENCELAB_ADDR=127.0.0.1:"+strconv.Itoa(pgtest.FreePort(t)))
	code, out := runBin(t, env, "", "migrate", "down", "1")
	require.Equal(t, 0, code, out)
	for _, cmd := range []string{"serve", "worker"} {
		code, out := runBin(t, env, "", cmd)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "this binary needs", cmd)
		require.Contains(t, out, "fencelab migrate up", cmd)
	}
	code, out = runBin(t, env, "", "migrate")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "migrate needs a verb: `fencelab migrate up`")

	code, out = runBin(t, env, "", "migrate", "up")
	require.Equal(t, 0, code, out)
	var version int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT version FROM schema_migrations`).Scan(&version))
	require.Contains(t, out, "version "+strconv.Itoa(version)+" (dirty=false)")
}

// The errors a newcomer meets first say what to do next.
func TestNewcomerErrorsSayWhatToDoNext(t *testing.T) {
	t.Parallel()
	empty := t.TempDir() // no .fencelab here: dev never ran
	var env []string
	for _, kv := range e2etest.ChildEnv("") {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "FENCELAB_") {
			env = append(env, kv)
		}
	}
	code, out := runBin(t, env, empty, "check")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "DATABASE_URL is not set and there is no .fencelab/env")
	require.Contains(t, out, "go run ./cmd/fencelab dev")

	code, out = runBin(t, env, empty, "token", "--sub", "user-0042")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "FENCELAB_TOKEN_SECRET is not set")
	require.Contains(t, out, "fencelab dev")

	code, out = runBin(t, env, empty, "env")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "run `go run ./cmd/fencelab dev` in this directory first")

	// --pause-at: the catalogue, one line per point; a typo refused.
	code, out = runBin(t, env, empty, "worker", "--pause-at", "list")
	require.Equal(t, 0, code, out)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), len(faults.Points))
	for _, p := range faults.Points {
		require.Contains(t, out, p.Name)
	}
	code, out = runBin(t, env, empty, "serve", "--pause-at", "befor_write")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `no fault point "befor_write"`)

	code, out = runBin(t, env, empty, "bench", "--help")
	require.Equal(t, 0, code, out, "help asked for is not an error")
	require.Contains(t, out, "points ")
	require.Contains(t, out, "never touched")
}

// dev checks what would make it fail before it provisions anything: the
// HTTP port (with a hint to --addr) and a second dev on the same data
// directory. It keeps the cluster's port across runs, env and psql reach
// that cluster, and --reset brings the demo data back.
func TestDevRefusesABusyPortAndASecondDevAndResetsOnRequest(t *testing.T) {
	t.Parallel()
	dir := e2etest.ScratchDir(t, "fencelab-devtest-")
	env := append(e2etest.ChildEnv(""), "DATABASE_URL=", "FENCELAB_TOKEN_SECRET=", "FENCELAB_DATA_DIR="+dir, "FENCELAB_ACCESS_LOG=false")

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	start := time.Now()
	code, out := runBin(t, env, dir, "dev", "--addr", busy.Addr().String())
	busy.Close()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "cannot listen on "+busy.Addr().String())
	require.Contains(t, out, "--addr 127.0.0.1:")
	require.NotContains(t, out, "provisioning", "the port is checked before provisioning")
	_, err = os.Stat(filepath.Join(dir, "pg"))
	require.True(t, os.IsNotExist(err), "no cluster was made for a dev that cannot serve")
	t.Logf("busy port refused in %s", time.Since(start))

	addr := "127.0.0.1:" + strconv.Itoa(pgtest.FreePort(t))
	// The cluster's own port (see e2e/docs): not the preferred 54329 that
	// another dev starting at the same moment may also take.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pg-port"), []byte(strconv.Itoa(pgtest.FreePort(t))+"\n"), 0o644))
	first := startDevIn(t, env, dir, addr)
	code, out = runBin(t, env, dir, "dev", "--addr", "127.0.0.1:"+strconv.Itoa(pgtest.FreePort(t)))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "another `fencelab dev` (pid "+strconv.Itoa(first.Pid())+") is running with the data directory")

	code, out = runBin(t, env, dir, "env")
	require.Equal(t, 0, code, out)
	for _, v := range []string{"DATABASE_URL", "FENCELAB_TOKEN_SECRET", "USER42", "ADMIN", "SVC"} {
		require.Contains(t, out, "export "+v+"='")
	}
	port, err := os.ReadFile(filepath.Join(dir, "pg-port"))
	require.NoError(t, err)
	require.Contains(t, out, "127.0.0.1:"+strings.TrimSpace(string(port))+"/fencelab")

	// A reader's change, then Ctrl-C and dev --reset: the demo data is back.
	code, out = runBin(t, env, dir, "psql", "-Atc", "UPDATE points_account SET balance = balance + 29 WHERE id = 'acct-0042' RETURNING balance")
	require.Equal(t, 0, code, out)
	require.Equal(t, "1029", strings.TrimSpace(strings.Split(out, "\n")[0]))
	stopDev(t, first)

	again := startDevIn(t, env, dir, addr, "--reset")
	code, out = runBin(t, env, dir, "psql", "-Atc", "SELECT balance FROM points_account WHERE id = 'acct-0042'")
	require.Equal(t, 0, code, out)
	require.Equal(t, "1000", strings.TrimSpace(out))
	port2, err := os.ReadFile(filepath.Join(dir, "pg-port"))
	require.NoError(t, err)
	require.Equal(t, string(port), string(port2), "the cluster keeps its port across runs")
	code, out = runBin(t, env, dir, "check")
	require.Equal(t, 0, code, out)
	stopDev(t, again)
}

func startDevIn(t *testing.T, env []string, dir, addr string, args ...string) *e2etest.Child {
	t.Helper()
	dev := e2etest.StartChildIn(t, "dev", dir, env, append([]string{"dev", "--addr", addr}, args...)...)
	require.Equal(t, "http://"+addr, waitForBanner(t, dev))
	return dev
}

func stopDev(t *testing.T, dev *e2etest.Child) {
	t.Helper()
	require.NoError(t, dev.Interrupt(t, 60*time.Second), "dev exits cleanly on Ctrl-C")
}
