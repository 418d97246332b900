package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/core/pg/pgserver"
)

// noPostgresHere makes this machine look as if it had no PostgreSQL: PATH
// and the binary search root point at an empty directory, and the Docker
// client at a socket that does not exist.
func noPostgresHere(t *testing.T) (empty string, env []string) {
	empty = t.TempDir()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "DATABASE_URL" || k == "DOCKER_HOST" || strings.HasPrefix(k, "FENCELAB_") || strings.HasPrefix(k, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return empty, append(env, "PATH="+empty, pgserver.SearchRootEnv+"="+empty,
		"DOCKER_HOST=unix://"+filepath.Join(empty, "docker.sock"))
}

// The acceptance through the real binary: `dev --no-install` on a machine
// without PostgreSQL exits 1, and its message is the command to run.
func TestDevNoInstallWithoutPostgresNamesTheAptCommand(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		t.Fatalf("this test proves the Debian/Ubuntu path (apt): run it on Debian or Ubuntu (%v)", err)
	}
	// ./test builds the binary once for every package
	// (FENCELAB_TEST_BINARY); plain go test builds it here.
	bin := os.Getenv("FENCELAB_TEST_BINARY")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "fencelab")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	empty, env := noPostgresHere(t)
	cmd := exec.Command(bin, "dev", "--no-install", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(empty, "data"))
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("dev --no-install without PostgreSQL: want exit 1, got %v\n%s", err, out.String())
	}
	want := "sudo apt-get update && sudo apt-get install -y postgresql"
	if os.Geteuid() == 0 {
		want = "apt-get update && apt-get install -y postgresql"
	}
	if !strings.Contains(out.String(), want) {
		t.Fatalf("the message must name the command %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "installing PostgreSQL") {
		t.Fatalf("--no-install must not install:\n%s", out.String())
	}
}

// Without --no-install, as root on Debian, dev runs apt-get update and
// install as one start-up step and then finds the server: the runner
// stands in for apt-get (it drops a fake initdb and postgres where the
// package would), everything else is dev's own code.
func TestDevInstallsPostgresWhenItMay(t *testing.T) {
	empty, _ := noPostgresHere(t)
	t.Setenv("PATH", empty)
	t.Setenv(pgserver.SearchRootEnv, empty)
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(empty, "docker.sock"))
	var ran [][]string
	apt := func(_ context.Context, argv []string) ([]byte, error) {
		ran = append(ran, argv)
		if slices.Contains(argv, "install") {
			bin := filepath.Join(empty, "15", "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				return nil, err
			}
			for _, n := range []string{"initdb", "postgres"} {
				if err := os.WriteFile(filepath.Join(bin, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
					return nil, err
				}
			}
		}
		return nil, nil
	}
	root := func() pgserver.Host { return pgserver.Host{Debian: true, Root: true} }
	if err := ensureServer(context.Background(), root, apt); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 2 || !slices.Contains(ran[0], "update") || !slices.Contains(ran[1], "postgresql") {
		t.Fatalf("want apt-get update then install postgresql, ran %q", ran)
	}

	// Found now: a second start installs nothing.
	ran = nil
	if err := ensureServer(context.Background(), root, apt); err != nil || len(ran) != 0 {
		t.Fatalf("a server is found: nothing to install (err %v, ran %q)", err, ran)
	}

	// --no-install: the command, nothing run.
	if err := os.RemoveAll(filepath.Join(empty, "15")); err != nil {
		t.Fatal(err)
	}
	noInstall := func() pgserver.Host { return pgserver.Host{Debian: true, Root: true, NoInstall: true} }
	err := ensureServer(context.Background(), noInstall, apt)
	if !errors.Is(err, pgserver.ErrNoPostgres) || !strings.Contains(err.Error(), "apt-get install -y postgresql") || len(ran) != 0 {
		t.Fatalf("--no-install: want the command and nothing run, got %v (ran %q)", err, ran)
	}
}
