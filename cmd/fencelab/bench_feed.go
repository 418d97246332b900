package main

import feedbench "github.com/fencelab/fencelab/bench/feed"

// `fencelab bench feed` (registered from its own file so that modules
// adding benchmarks in parallel do not collide).
func init() {
	benches["feed"] = bench{feedbench.Run, "push, pull and hybrid fan-out on copies of one generated graph: rows written per post, reads, rows scanned"}
}
