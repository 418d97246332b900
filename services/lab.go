package services

import (
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
	"github.com/fencelab/fencelab/services/points"
	"github.com/fencelab/fencelab/services/shortlink"
)

// Experiments lists every module's experiments in the book's chapter order.
func Experiments() []lab.Experiment {
	var all []lab.Experiment
	for _, list := range [][]lab.Experiment{
		points.Experiments,
		reserve.Experiments,
		order.Experiments,
		shortlink.Experiments,
	} {
		all = append(all, list...)
	}
	return lab.Sorted(all)
}
