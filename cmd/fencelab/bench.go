package main

import (
	"fmt"
	"os"
	"sort"
)

// bench is one `fencelab bench NAME`: its runner (in bench/NAME) and the
// line `fencelab bench --help` shows for it.
type bench struct {
	run   func(args []string) error
	about string
}

// benches maps `fencelab bench NAME` to its runner; each registers from a
// file of its own (bench_NAME.go). Benchmarks run on a fresh local cluster
// with durability left on, removed afterwards, or on --database-url when
// given — never on DATABASE_URL or the dev database — and print their
// figures; they are never timed tests.
var benches = map[string]bench{}

func runBench(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		names := make([]string, 0, len(benches))
		width := 0
		for n := range benches {
			names = append(names, n)
			width = max(width, len(n))
		}
		sort.Strings(names)
		fmt.Fprintln(os.Stderr, "Usage: fencelab bench NAME [flags]   (fencelab bench NAME --help for its flags)")
		fmt.Fprintln(os.Stderr, "\nEach runs on a fresh local PostgreSQL (fsync on), removed afterwards, unless given --database-url;")
		fmt.Fprintln(os.Stderr, "none reads DATABASE_URL, so the dev database is never touched. Benchmarks:")
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "  %-*s  %s\n", width, n, benches[n].about)
		}
		return errUsage
	}
	b, ok := benches[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (fencelab bench --help lists them)", args[0])
	}
	return b.run(args[1:])
}
