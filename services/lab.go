package services

import (
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
	"github.com/fencelab/fencelab/services/points"
)

// Experiments lists every module's experiments in the book's chapter order.
func Experiments() []lab.Experiment {
	var all []lab.Experiment
	for _, list := range [][]lab.Experiment{
		points.Experiments,
		reserve.Experiments,
	} {
		all = append(all, list...)
	}
	return lab.Sorted(all)
}
