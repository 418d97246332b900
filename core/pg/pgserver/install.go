package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Host is what DecideInstall looks at when no PostgreSQL was found (no
// URL, no server binaries, no Docker engine). DetectHost fills it from the
// machine; tests fill it by hand.
type Host struct {
	Debian    bool // Debian or Ubuntu (/etc/debian_version): apt-get has the server
	Root      bool // we may run apt-get ourselves
	Sudo      bool // `sudo -n true` works: we may run it through sudo
	NoInstall bool // the user said not to (`dev --no-install`)
}

// InstallPlan is what to do about a missing server: Run, when set, is the
// commands that install it, in order; otherwise Manual, when set, is the
// exact command for the user. Both empty: not a machine we know how to
// install on (ErrNoPostgres says what to do).
type InstallPlan struct {
	Run    [][]string
	Manual string
}

// Package is the Debian package of the PostgreSQL server (the
// distribution's current major version; it also creates the `postgres`
// OS user the server runs as when we are root).
const Package = "postgresql"

// DecideInstall is pure so every branch is unit-tested; only Install runs
// anything. apt-get update comes first: a fresh machine's package lists
// are often empty or stale, and install fails on them.
func DecideInstall(h Host) InstallPlan {
	if !h.Debian {
		return InstallPlan{}
	}
	apt := func(prefix ...string) [][]string {
		env := append(prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get")
		return [][]string{
			append(append([]string{}, env...), "update", "-qq"),
			append(append([]string{}, env...), "install", "-y", "-qq", Package),
		}
	}
	manual := "apt-get update && apt-get install -y " + Package
	if !h.Root {
		manual = "sudo apt-get update && sudo apt-get install -y " + Package
	}
	switch {
	case h.NoInstall:
		return InstallPlan{Manual: manual}
	case h.Root:
		return InstallPlan{Run: apt()}
	case h.Sudo:
		return InstallPlan{Run: apt("sudo", "-n")}
	}
	return InstallPlan{Manual: manual}
}

// DetectHost fills Host from the machine.
func DetectHost(ctx context.Context, noInstall bool) Host {
	h := Host{NoInstall: noInstall, Root: os.Geteuid() == 0}
	_, err := os.Stat("/etc/debian_version")
	h.Debian = err == nil
	if !h.Root && h.Debian && !noInstall {
		h.Sudo = exec.CommandContext(ctx, "sudo", "-n", "true").Run() == nil
	}
	return h
}

// NotInstalledError is returned when the server is missing and is not to
// be installed by us: its message is the exact command to run.
type NotInstalledError struct{ Plan InstallPlan }

func (e NotInstalledError) Error() string {
	if e.Plan.Manual == "" {
		return ErrNoPostgres.Error()
	}
	return "pgserver: no PostgreSQL found (no DATABASE_URL, no initdb/postgres on PATH or under " + SearchRoot() +
		"/*/bin, no Docker engine); install the server, then start again: " + e.Plan.Manual
}

func (e NotInstalledError) Unwrap() error { return ErrNoPostgres }

// Runner runs one command (argv) and returns its combined output; tests
// inject a recorder in place of exec.
type Runner func(ctx context.Context, argv []string) ([]byte, error)

// ExecRunner runs argv for real.
func ExecRunner(ctx context.Context, argv []string) ([]byte, error) {
	return exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
}

// Install runs plan's commands in order, stopping at the first failure
// (whose output is in the error); a plan without commands is a
// NotInstalledError.
func Install(ctx context.Context, plan InstallPlan, run Runner) error {
	if len(plan.Run) == 0 {
		return NotInstalledError{Plan: plan}
	}
	for _, argv := range plan.Run {
		if out, err := run(ctx, argv); err != nil {
			return fmt.Errorf("pgserver: %s: %w\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return nil
}
