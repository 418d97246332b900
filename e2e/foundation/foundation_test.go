package foundation_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestHealthReadinessAndMetricsAnswer(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	require.Equal(t, 200, a.Do(t, e2etest.Req{Method: "GET", Path: "/healthz"}).Status)

	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/readyz"})
	require.Equal(t, 200, r.Status, string(r.Body))

	m := a.Do(t, e2etest.Req{Method: "GET", Path: "/metrics"})
	require.Equal(t, 200, m.Status)
	for _, name := range []string{"fencelab_db_pool_max_conns", "fencelab_db_pool_acquired_conns", "fencelab_http_request_duration_seconds_bucket"} {
		require.Contains(t, string(m.Body), name)
	}
}

// A replica whose schema is behind the binary must not take traffic.
func TestReadyzRefusesAStaleSchema(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	_, err := a.Pool.Exec(context.Background(), `UPDATE schema_migrations SET version = 0`)
	require.NoError(t, err)
	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/readyz"})
	require.Equal(t, 503, r.Status)
	require.Equal(t, "migrations_pending", r.Code())
}

// `fencelab check` is the same registry the tests use, against a live
// database: exit 0 when everything holds, exit 1 and the offending rows
// when an invariant is broken by hand.
func TestCheckCommandExitsOneWithTheOffendingRows(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	bin := e2etest.Binary(t)
	run := func() (int, string) {
		cmd := exec.Command(bin, "check")
		cmd.Env = e2etest.ChildEnv(a.DBURL)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return code, out.String()
	}
	code, out := run()
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok    CORE-I0")

	_, err := a.Pool.Exec(context.Background(), `UPDATE schema_migrations SET dirty = true`)
	require.NoError(t, err)
	code, out = run()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "FAIL  CORE-I0")
	require.Contains(t, out, "dirty")

	list, err := exec.Command(bin, "check", "--list").Output()
	require.NoError(t, err)
	require.Contains(t, string(list), "CORE-I0")
}

func TestTokenCommandMintsATokenTheServerAccepts(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	bin := e2etest.Binary(t)
	cmd := exec.Command(bin, "token", "--sub", "user-0042", "--role", "user", "--ttl", "5m")
	cmd.Env = e2etest.ChildEnv(a.DBURL)
	out, err := cmd.Output()
	require.NoError(t, err)
	p, err := a.Deps.Auth.Verify(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	require.Equal(t, httpx.Principal{Subject: "user-0042", Role: httpx.RoleUser}, p)

	bad := exec.Command(bin, "token", "--sub", "user-0042", "--role", "root")
	bad.Env = e2etest.ChildEnv(a.DBURL)
	require.Error(t, bad.Run())
}
