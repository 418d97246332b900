package main

import uploadbench "github.com/fencelab/fencelab/bench/upload"

// `fencelab bench upload` (registered from its own file so that modules
// adding benchmarks in parallel do not collide).
func init() {
	benches["upload"] = bench{uploadbench.Run, "one file over HTTP to a serve child process: MB/s next to dd conv=fsync, peak RSS"}
}
