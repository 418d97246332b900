package main

import shortlinkbench "github.com/fencelab/fencelab/bench/shortlink"

// `fencelab bench shortlink` (registered here rather than in the benches
// literal so that modules adding benchmarks in parallel do not collide).
func init() {
	benches["shortlink"] = bench{shortlinkbench.Run, "cache-hit redirects next to a constant 302, with the stats store healthy and locked"}
}
