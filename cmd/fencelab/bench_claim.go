package main

import claimbench "github.com/fencelab/fencelab/bench/claim"

// fencelab bench claim --jobs 50000 --workers N
func init() { benches["claim"] = claimbench.Run }
