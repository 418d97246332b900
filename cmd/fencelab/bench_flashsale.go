package main

import flashsalebench "github.com/fencelab/fencelab/bench/flashsale"

// `fencelab bench flashsale` (registered here rather than in the benches
// literal so that modules adding benchmarks in parallel do not collide).
func init() {
	benches["flashsale"] = bench{flashsalebench.Run, "N buyers press buy at once on 40 units: time to sell out, p50/p99 of accepted and refused answers"}
}
