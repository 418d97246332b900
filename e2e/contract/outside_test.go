package contract_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
)

// The contract, tried with the tools a client author reaches for: Redocly
// CLI and Spectral lint it, and Prism (a validating proxy and mock server)
// checks a recorded session against it. They come from the npm registry,
// pinned in tools/npm/package-lock.json; a machine without them fails here
// with the command that installs them, rather than skipping.

// npmTool is the path of a CLI installed by `npm ci --prefix tools/npm`.
func npmTool(t *testing.T, name string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := filepath.Join(root, "tools", "npm", "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is not installed (%v): run `npm ci --prefix tools/npm` from the repository root (node and npm needed; "+
			"the versions are pinned in tools/npm/package-lock.json)", name, err)
	}
	return bin
}

// toolsDir holds the linters' configuration (tools/npm).
func toolsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../tools/npm")
	require.NoError(t, err)
	return dir
}

// servedContract fetches GET /openapi.json from a and writes it to a file.
func servedContract(t *testing.T, a *e2etest.App) string {
	t.Helper()
	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/openapi.json"})
	require.Equal(t, http.StatusOK, r.Status)
	file := filepath.Join(t.TempDir(), "openapi.json")
	require.NoError(t, os.WriteFile(file, r.Body, 0o600))
	return file
}

// toolEnv keeps the tools quiet and offline: no telemetry, no update check.
func toolEnv() []string {
	return append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_UPDATE_NOTIFIER=1", "CI=true")
}

// TestContractPassesOutsideLinters: Redocly CLI (its recommended rules, with
// the 2XX rule widened to "a 2XX or a declared 3XX" for the redirect-only
// route; tools/npm/redocly.yaml) reports no error, and Spectral's
// spectral:oas ruleset no error and fewer than 20 warnings, on the
// document the server serves.
func TestContractPassesOutsideLinters(t *testing.T) {
	t.Parallel()
	redocly, spectral := npmTool(t, "redocly"), npmTool(t, "spectral")
	dir := toolsDir(t)
	file := servedContract(t, e2etest.Start(t, e2etest.Options{}))

	t.Run("redocly", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(redocly, "lint", "--config", filepath.Join(dir, "redocly.yaml"), "--format=json", file)
		cmd.Dir, cmd.Env = dir, toolEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output() // exit status 1 when it finds errors: the report says which
		var report struct {
			Totals struct {
				Errors, Warnings int
			}
			Problems []struct {
				RuleID   string `json:"ruleId"`
				Severity string
				Message  string
				Location []struct{ Pointer string }
			}
		}
		require.NoError(t, json.Unmarshal(out, &report), "redocly lint: %v\nstdout: %.2000s\nstderr: %.2000s", err, out, stderr.String())
		var errs []string
		for _, p := range report.Problems {
			line := fmt.Sprintf("%s %s: %s", p.Severity, p.RuleID, p.Message)
			if len(p.Location) > 0 {
				line += " at " + p.Location[0].Pointer
			}
			t.Log(line)
			if p.Severity == "error" {
				errs = append(errs, line)
			}
		}
		require.Empty(t, errs, "redocly lint errors")
		require.Zero(t, report.Totals.Errors)
		require.NoError(t, err, "redocly lint exits 0 without errors; stderr: %s", stderr.String())
	})

	t.Run("spectral", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(spectral, "lint", "--ruleset", filepath.Join(dir, "spectral-oas.yaml"), "--format", "json", "--quiet", file)
		cmd.Dir, cmd.Env = dir, toolEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var results []struct {
			Code     string
			Message  string
			Severity int // 0 error, 1 warning, 2 information, 3 hint
			Path     []any
		}
		require.NoError(t, json.Unmarshal(bytes.TrimSpace(out), &results), "spectral lint: %v\nstdout: %.2000s\nstderr: %.2000s", err, out, stderr.String())
		var errs, warns []string
		for _, r := range results {
			line := fmt.Sprintf("%s: %s at %v", r.Code, r.Message, r.Path)
			t.Log(line)
			switch r.Severity {
			case 0:
				errs = append(errs, line)
			case 1:
				warns = append(warns, line)
			}
		}
		require.Empty(t, errs, "spectral errors")
		require.Less(t, len(warns), 20, "spectral warnings")
		require.NoError(t, err, "spectral exits 0 without errors; stderr: %s", stderr.String())
	})
}

// prism runs `prism proxy --errors` for the document in spec in front of
// upstream on a free loopback port and returns its base URL and its log.
func prism(t *testing.T, spec, upstream string) (string, func() string) {
	t.Helper()
	bin := npmTool(t, "prism")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "proxy", spec, upstream, "--errors", "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	cmd.Env = toolEnv()
	log := &e2etest.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cancel(); <-exited })

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.After(90 * time.Second) // node starts slowly on a busy machine
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(log.String(), "Prism is listening") {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prism exited before listening (%v):\n%s", err, log.String())
		case <-deadline:
			t.Fatalf("prism did not start listening on %s within 90 s:\n%s", base, log.String())
		case <-tick.C: // its log is the readiness signal
		}
	}
	return base, log.String
}
