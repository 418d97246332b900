package main

import flashsalebench "github.com/fencelab/fencelab/bench/flashsale"

// `fencelab bench flashsale` (registered here rather than in the benches
// literal so that modules adding benchmarks in parallel do not collide).
func init() { benches["flashsale"] = flashsalebench.Run }
