package main

import pointsbench "github.com/fencelab/fencelab/bench/points"

// `fencelab bench points` (registered from its own file so that modules
// adding benchmarks in parallel do not collide).
func init() {
	benches["points"] = bench{pointsbench.Run, "debits over HTTP with a fresh key each, then one hot account; the invariants after"}
}
