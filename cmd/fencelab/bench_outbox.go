package main

import outboxbench "github.com/fencelab/fencelab/bench/outbox"

func init() {
	benches["outbox"] = bench{outboxbench.Run, "append rate inside business transactions, consumer throughput, lag under a steady load"}
}
