// Package program is the composition root: the one place that knows every
// part of the deployable and wires each with only what it needs. It lists
// the modules (the console among them), the benches and the lab; `fencelab`
// (serve, worker, dev, check, bench, lab), the e2e harness and the docs
// read the program from here. Nothing below it imports it.
package program

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/fencelab/fencelab/api"
	claimbench "github.com/fencelab/fencelab/bench/claim"
	consolebench "github.com/fencelab/fencelab/bench/console"
	feedbench "github.com/fencelab/fencelab/bench/feed"
	flashsalebench "github.com/fencelab/fencelab/bench/flashsale"
	growthbench "github.com/fencelab/fencelab/bench/growth"
	hostilebench "github.com/fencelab/fencelab/bench/hostile"
	outboxbench "github.com/fencelab/fencelab/bench/outbox"
	pointsbench "github.com/fencelab/fencelab/bench/points"
	shortlinkbench "github.com/fencelab/fencelab/bench/shortlink"
	uploadbench "github.com/fencelab/fencelab/bench/upload"
	"github.com/fencelab/fencelab/console"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/book"
	"github.com/fencelab/fencelab/lab/labenv"
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

// Modules is the program: every module in the book's chapter order, then
// the HTTP contract and the web console. It needs no database; app.Build
// makes the runtime parts. runner runs the console's experiments (nil: the
// console lists them but cannot run them, as for a bench).
func Modules(runner *console.Runner) []app.Module {
	return append(products(), console.Module(console.Options{ // the web console: the experiments and the invariants, drawn
		Experiments: book.Experiments(),
		Invariants:  Invariants(),
		Runner:      runner,
	}))
}

// products is the list proper, one line a module. The console comes after
// it in Modules because it draws the registry these modules make.
func products() []app.Module {
	return []app.Module{
		ops.Lease(),        // 1 lease
		report.Module(),    // 1 lease: the daily report behind the fence guard
		ops.Claim(),        // 2 claim
		ops.Idem(),         // 3 idem
		ops.Outbox(),       // 4 outbox
		points.Module(),    // 5 points
		flashsale.Module(), // 6 reservations, 7 orders
		social.Module(),    // 8 relations, 9 feed, 10 likes
		notify.Module(),    // 11 notify
		shortlink.Module(), // 12 shortlink
		upload.Module(),    // 13 upload
		workflow.Module(),  // 14 failover
		api.Module(),       // the HTTP contract: GET /openapi.json, /openapi.yaml, /docs/api
	}
}

// Benches are the `fencelab bench NAME` load generators. Each receives the
// module list (Bench.Run) rather than importing this package.
func Benches() []app.Bench {
	return []app.Bench{
		claimbench.Bench,
		growthbench.Bench, // every module's retention and history-bound queries
		outboxbench.Bench,
		pointsbench.Bench,
		flashsalebench.Bench,
		feedbench.Bench,
		shortlinkbench.Bench,
		uploadbench.Bench,
		consolebench.Bench,
		hostilebench.Bench, // every route that takes a body, under worst-case bodies
		exploreBench,       // lab explore: schedules per second
	}
}

// Bench returns the bench called name.
func Bench(name string) (app.Bench, bool) {
	for _, b := range Benches() {
		if b.Name == name {
			return b, true
		}
	}
	return app.Bench{}, false
}

// Experiments is the lab's one list, in the book's order.
func Experiments() []lab.Experiment { return book.Experiments() }

// Invariants is the registry of every module's invariants (`fencelab
// check`, the console, the e2e tests). The lists are static, so a
// duplicate ID is a programming mistake and panics on first use. The
// console brings no invariant of its own.
var Invariants = sync.OnceValue(func() *invariant.Registry {
	r, err := app.Invariants(products())
	if err != nil {
		panic(err)
	}
	return r
})

// Lab is what the lab environment needs of the program: every app it
// starts is this program, its console with a runner of its own.
func Lab() labenv.Program {
	return labenv.Program{
		Modules: func(t lab.T, log *slog.Logger) []app.Module {
			r := NewRunner(log)
			t.Cleanup(r.Close)
			return Modules(r)
		},
		Invariants: Invariants(),
	}
}

// NewRunner is the console's runner of experiments on a cluster of its
// own (FENCELAB_LAB_DATABASE_URL, or a throwaway local one), provisioned
// on the first run and removed by Close.
func NewRunner(log *slog.Logger) *console.Runner {
	return console.NewRunner(func(ctx context.Context) (lab.Env, func() error, error) {
		cl, err := labenv.NewCluster(ctx, app.Env(labenv.EnvLabDatabaseURL, ""), Lab())
		if err != nil {
			return nil, nil, fmt.Errorf("lab cluster: %w", err)
		}
		return cl, cl.Close, nil
	}, 1, 4, log)
}
