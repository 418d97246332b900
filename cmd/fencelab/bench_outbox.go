package main

import outboxbench "github.com/fencelab/fencelab/bench/outbox"

func init() { benches["outbox"] = outboxbench.Run }
