// Package services lists every module of the deployable. It is the only
// package that knows them all: `fencelab` (serve, worker, dev, check,
// bench), the e2e tests and the docs read the program from Modules.
package services

import (
	"sync"

	"github.com/fencelab/fencelab/api"
	claimbench "github.com/fencelab/fencelab/bench/claim"
	feedbench "github.com/fencelab/fencelab/bench/feed"
	flashsalebench "github.com/fencelab/fencelab/bench/flashsale"
	growthbench "github.com/fencelab/fencelab/bench/growth"
	hostilebench "github.com/fencelab/fencelab/bench/hostile"
	outboxbench "github.com/fencelab/fencelab/bench/outbox"
	pointsbench "github.com/fencelab/fencelab/bench/points"
	shortlinkbench "github.com/fencelab/fencelab/bench/shortlink"
	uploadbench "github.com/fencelab/fencelab/bench/upload"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/services/flashsale"
	"github.com/fencelab/fencelab/services/notify"
	"github.com/fencelab/fencelab/services/ops"
	"github.com/fencelab/fencelab/services/points"
	"github.com/fencelab/fencelab/services/report"
	"github.com/fencelab/fencelab/services/shortlink"
	"github.com/fencelab/fencelab/services/social"
	"github.com/fencelab/fencelab/services/upload"
	"github.com/fencelab/fencelab/services/workflow"
)

// Modules is the program: every module in the book's chapter order, one
// line each. It needs no database; app.Build makes the runtime parts.
//
// Benches are attached here, not in the modules' own packages: a bench
// imports the service it loads (its seeds, its settings), so a service
// listing its bench would import itself. A bench receives the module list
// as a parameter instead of importing this package, which keeps the graph
// services → bench → services/<module> acyclic.
func Modules() []app.Module {
	return []app.Module{
		ops.Lease(),     // 1 lease
		report.Module(), // 1 lease: the daily report behind the fence guard
		with(ops.Claim(), claimbench.Bench, growthbench.Bench), // 2 claim; growth: every module's retention and history-bound queries
		ops.Idem(),                                     // 3 idem
		with(ops.Outbox(), outboxbench.Bench),          // 4 outbox
		with(points.Module(), pointsbench.Bench),       // 5 points
		with(flashsale.Module(), flashsalebench.Bench), // 6 reservations, 7 orders
		with(social.Module(), feedbench.Bench),         // 8 relations, 9 feed, 10 likes
		notify.Module(),                                // 11 notify
		with(shortlink.Module(), shortlinkbench.Bench), // 12 shortlink
		with(upload.Module(), uploadbench.Bench),       // 13 upload
		workflow.Module(),                              // 14 failover
		with(api.Module(), hostilebench.Bench),         // the HTTP contract: GET /openapi.json, /openapi.yaml, /docs/api; hostile: bodies at the limit
	}
}

func with(m app.Module, benches ...app.Bench) app.Module {
	m.Benches = append(m.Benches, benches...)
	return m
}

// Invariants is the registry of every module's invariants (`fencelab
// check`, the e2e tests). The lists are static, so a duplicate ID is a
// programming mistake and panics on first use.
var Invariants = sync.OnceValue(func() *invariant.Registry {
	r, err := app.Invariants(Modules())
	if err != nil {
		panic(err)
	}
	return r
})
