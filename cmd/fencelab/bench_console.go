package main

import consolebench "github.com/fencelab/fencelab/bench/console"

func init() { benches["console"] = consolebench.Run }
