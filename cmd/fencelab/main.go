// Command fencelab is the one deployable: every HTTP API, every background
// worker, migrations, invariant checks, tokens and benchmarks.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

const usage = `fencelab — a runnable reference for correctness under concurrency

Usage:
  fencelab dev [--reset]            provision PostgreSQL, migrate, seed, serve everything (start here)
  fencelab env                      shell exports for the dev database and demo tokens: eval "$(fencelab env)"
  fencelab psql [ARGS]              psql on the dev database (ARGS go to psql, e.g. -c 'SELECT 1')
  fencelab serve [--migrate]        all HTTP APIs on one port, plus the background workers
                                    (--pause-at list: every fault point an experiment can pause at)
  fencelab worker                   background workers only (run several for multi-process setups)
  fencelab migrate up|down [N]|version
  fencelab check [--list] [MODULE|ID ...]
                                    run the SQL invariants against DATABASE_URL; exit 1 on any violation
  fencelab token --sub user-0042 [--role user|admin|service] [--ttl 24h]
  fencelab lab list|run ID [--naive]  run the book's experiments on a scratch database and watch them
  fencelab docs [--check]          regenerate the chapter pages' invariant and experiment blocks
  fencelab bench NAME [flags]       benchmarks (fencelab bench --help lists them)
  fencelab seed social --users N --seed S
                                    load a generated follow graph with posts into DATABASE_URL
  fencelab openapi [--yaml]         print the HTTP contract (OpenAPI 3.1; also GET /openapi.json)

Every subcommand takes --help. Configuration comes from flags or the
environment: DATABASE_URL, FENCELAB_ADDR, FENCELAB_TOKEN_SECRET,
FENCELAB_DB_MAX_CONNS, FENCELAB_WORKERS, FENCELAB_DATA_DIR, FENCELAB_LOG_LEVEL,
FENCELAB_LOG_FORMAT, FENCELAB_ACCESS_LOG, FENCELAB_SHUTDOWN_GRACE. After
'fencelab dev' has run once, check, token, migrate, psql and env read
DATABASE_URL and the token secret from .fencelab/env when they are not set
(benchmarks never do: they use a fresh cluster unless given --database-url).
`

var commands = map[string]func(args []string) error{
	"dev":     runDev,
	"serve":   runServe,
	"worker":  runWorker,
	"migrate": runMigrate,
	"check":   runCheck,
	"token":   runToken,
	"bench":   runBench,
	"seed":    runSeed,
	"env":     runEnv,
	"psql":    runPsql,
	"lab":     runLab,
	"docs":    runDocs,
	"openapi": runOpenAPI,
}

// errUsage marks an error whose message is already printed (exit 2).
var errUsage = errors.New("usage")

// errHelp: --help was asked for and printed (exit 0).
var errHelp = errors.New("help")

// parseFlags parses args: errHelp after --help, errUsage after a mistake
// (both already printed by the flag package).
func parseFlags(fs *flag.FlagSet, args []string) error {
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return errHelp
	case err != nil:
		return errUsage
	}
	return nil
}

// exitError carries a specific exit code (check exits 1 on violations).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Print(usage)
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "fencelab: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	err := cmd(os.Args[2:])
	var ee exitError
	switch {
	case err == nil, errors.Is(err, errHelp):
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.Is(err, errListed):
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "fencelab %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// newFlags returns a flag set whose errors are reported, not fatal.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fencelab %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}
