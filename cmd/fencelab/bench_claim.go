package main

import claimbench "github.com/fencelab/fencelab/bench/claim"

// fencelab bench claim --jobs 50000 --workers N
func init() {
	benches["claim"] = bench{claimbench.Run, "enqueue then drain no-op jobs with fenced claims and completions: jobs/s, p99 claim→complete"}
}
