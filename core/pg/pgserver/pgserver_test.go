package pgserver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The provisioning order is the spec's: a given URL, then local binaries,
// then a container, then a clear error. Docker is absent here, so the
// container branch is proven by this table rather than by running one.
func TestChooseFollowsTheSpecOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  Env
		want Strategy
	}{
		{Env{URL: "postgres://x", BinDir: "/bin", DockerAnswer: true}, FromURL},
		{Env{BinDir: "/usr/lib/postgresql/15/bin", DockerAnswer: true}, Local},
		{Env{DockerAnswer: true}, Container},
	}
	for _, c := range cases {
		got, err := Choose(c.env)
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	_, err := Choose(Env{})
	require.ErrorIs(t, err, ErrNoPostgres)
	require.Contains(t, err.Error(), "apt-get install postgresql")
}

func TestURLCarriesDatabaseName(t *testing.T) {
	t.Parallel()
	s := &Server{Host: "127.0.0.1", Port: 5555, User: "postgres"}
	require.Equal(t, "postgres://postgres@127.0.0.1:5555/app?sslmode=disable", s.URL("app"))
	g, err := fromURL("postgres://u:p@db.example.test:6543/x?sslmode=require")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p@db.example.test:6543/other?sslmode=require", g.URL("other"))
}

// A machine without a server: dev installs it with apt when it may (root,
// or sudo without a password), and otherwise names the exact command;
// --no-install always names it. Off Debian/Ubuntu it installs nothing.
func TestDecideInstallRunsAptOnlyWhenItMay(t *testing.T) {
	t.Parallel()
	aptAs := func(prefix ...string) [][]string {
		e := append(prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get")
		return [][]string{
			append(append([]string{}, e...), "update", "-qq"),
			append(append([]string{}, e...), "install", "-y", "-qq", "postgresql"),
		}
	}
	cases := []struct {
		name string
		host Host
		want InstallPlan
	}{
		{"root installs", Host{Debian: true, Root: true}, InstallPlan{Run: aptAs()}},
		{"sudo installs", Host{Debian: true, Sudo: true}, InstallPlan{Run: aptAs("sudo", "-n")}},
		{"no sudo: the command", Host{Debian: true}, InstallPlan{Manual: "sudo apt-get update && sudo apt-get install -y postgresql"}},
		{"--no-install as root: the command", Host{Debian: true, Root: true, NoInstall: true}, InstallPlan{Manual: "apt-get update && apt-get install -y postgresql"}},
		{"--no-install with sudo: the command", Host{Debian: true, Sudo: true, NoInstall: true}, InstallPlan{Manual: "sudo apt-get update && sudo apt-get install -y postgresql"}},
		{"not Debian: nothing", Host{Root: true, Sudo: true}, InstallPlan{}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, DecideInstall(c.host), c.name)
	}
}

// Install runs the plan's commands in order through the runner and stops
// at the first failure; a plan without commands is an error carrying the
// exact command (and ErrNoPostgres).
func TestInstallRunsThePlanInOrder(t *testing.T) {
	t.Parallel()
	var ran [][]string
	ok := func(_ context.Context, argv []string) ([]byte, error) { ran = append(ran, argv); return nil, nil }
	plan := DecideInstall(Host{Debian: true, Root: true})
	require.NoError(t, Install(context.Background(), plan, ok))
	require.Equal(t, plan.Run, ran)

	ran = nil
	fail := func(_ context.Context, argv []string) ([]byte, error) {
		ran = append(ran, argv)
		return []byte("E: Unable to locate package"), errors.New("exit status 100")
	}
	err := Install(context.Background(), plan, fail)
	require.ErrorContains(t, err, "apt-get update -qq")
	require.ErrorContains(t, err, "E: Unable to locate package")
	require.Len(t, ran, 1, "nothing runs after a failed step")

	ran = nil
	err = Install(context.Background(), DecideInstall(Host{Debian: true, Root: true, NoInstall: true}), ok)
	require.ErrorIs(t, err, ErrNoPostgres)
	require.ErrorContains(t, err, "apt-get update && apt-get install -y postgresql")
	require.Empty(t, ran)
}

// The binaries are found on PATH first, then under the search root's
// newest */bin that holds both initdb and postgres; an empty PATH and an
// empty root find nothing (the state DecideInstall is for).
func TestFindBinDirLooksOnPathThenTheNewestVersion(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	noPath := func(string) (string, error) { return "", exec.ErrNotFound }
	require.Empty(t, findBinDir(noPath, root))

	fake := func(dir string, names ...string) {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, n := range names {
			require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755))
		}
	}
	fake(filepath.Join(root, "15", "bin"), "initdb", "postgres")
	fake(filepath.Join(root, "16", "bin"), "initdb", "postgres")
	fake(filepath.Join(root, "17", "bin"), "initdb") // a client-only install: no server
	require.Equal(t, filepath.Join(root, "16", "bin"), findBinDir(noPath, root))

	onPath := filepath.Join(t.TempDir(), "bin")
	fake(onPath, "initdb", "postgres")
	look := func(name string) (string, error) { return filepath.Join(onPath, name), nil }
	require.Equal(t, onPath, findBinDir(look, root))
}
