package services

import "github.com/fencelab/fencelab/core/lab"

// Experiments lists every module's experiments in the book's chapter order.
func Experiments() []lab.Experiment {
	var all []lab.Experiment
	for _, m := range Modules() {
		all = append(all, m.Experiments...)
	}
	return lab.Sorted(all)
}
