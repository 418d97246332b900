package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// benches maps `fencelab bench NAME` to its runner; each lives in bench/NAME.
// Benchmarks run against DATABASE_URL (or a fresh local cluster with
// durability left on) and print their figures; they are never timed tests.
var benches = map[string]func(args []string) error{}

func runBench(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		names := make([]string, 0, len(benches))
		for n := range benches {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(os.Stderr, "Usage: fencelab bench NAME [flags]   (fencelab bench NAME --help for its flags)")
		fmt.Fprintln(os.Stderr, "Benchmarks:")
		for _, n := range names {
			fmt.Fprintln(os.Stderr, "  "+n)
		}
		if len(args) == 0 {
			return errUsage
		}
		return errHelp
	}
	b, ok := benches[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (fencelab bench --help lists them)", args[0])
	}
	loadLocalEnv("")
	if err := b(args[1:]); errors.Is(err, flag.ErrHelp) {
		return errHelp
	} else {
		return err
	}
}
