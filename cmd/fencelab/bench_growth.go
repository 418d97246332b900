package main

import growthbench "github.com/fencelab/fencelab/bench/growth"

// fencelab bench growth --history 1000000
func init() { benches["growth"] = growthbench.Run }
