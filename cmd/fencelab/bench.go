package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/fencelab/fencelab/program"
)

// runBench is `fencelab bench NAME`: the benches the program lists (each
// lives in bench/NAME). Benchmarks run on a fresh local cluster with
// durability left on, removed afterwards, or on --database-url when given —
// never on DATABASE_URL or the dev database — and print their figures,
// ending with one RESULT line; they are never timed tests.
func runBench(args []string) error {
	mods := program.Modules(nil) // every module and the console (its bench runs no experiment)
	benches := program.Benches()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "Usage: fencelab bench NAME [flags]   (fencelab bench NAME --help for its flags)")
		fmt.Fprintln(os.Stderr, "\nEach runs on a fresh local PostgreSQL (fsync on), removed afterwards, unless given --database-url;")
		fmt.Fprintln(os.Stderr, "none reads DATABASE_URL, so the dev database is never touched. Benchmarks:")
		for _, b := range benches {
			fmt.Fprintf(os.Stderr, "  %-10s %s\n", b.Name, b.Summary)
		}
		if len(args) == 0 {
			return errUsage
		}
		return errHelp
	}
	for _, b := range benches {
		if b.Name == args[0] {
			if err := b.Run(mods, args[1:]); !errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errHelp
		}
	}
	return fmt.Errorf("unknown benchmark %q (fencelab bench --help lists them)", args[0])
}
