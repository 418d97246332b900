package main

import pointsbench "github.com/fencelab/fencelab/bench/points"

// `fencelab bench points` (registered from its own file so that modules
// adding benchmarks in parallel do not collide).
func init() { benches["points"] = pointsbench.Run }
