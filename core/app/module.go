package app

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
)

// Module is everything one module brings to the deployable, as plain
// fields. The static part (name, chapter, invariants, error mappings) is
// readable without a database — `fencelab check --list` and the docs read
// it — and Build makes the runtime part from the process's dependencies.
// program.Modules is the one list of them. A module knows nothing of its
// experiments or its benches: the lab and the benches import the product,
// never the other way.
type Module struct {
	Name string
	// Chapter is the slug of the module's chapter in the book ("" for a
	// module spanning several: its invariants say which).
	Chapter string
	// Invariants are the module's SQL invariants (`fencelab check`,
	// invariant.Registry.Assert in tests).
	Invariants []invariant.Invariant
	// Errors map the module's sentinel errors to HTTP answers.
	Errors []httpx.ErrorMapping
	// Build makes the runtime part from the shared dependencies; nil for a
	// module that brings only static parts.
	Build func(d Deps) (Runtime, error)
}

// Runtime is the part of a module built for one process.
type Runtime struct {
	// Routes mounts the module's HTTP routes.
	Routes func(e *echo.Echo)
	// Tasks are background loops run by `serve` and `worker`.
	Tasks []Task
	// Seed writes the module's demo data for `dev`; it must be idempotent.
	Seed func(ctx context.Context) error
	// LargeBodyPrefixes are route prefixes that enforce their own body
	// limits (uploads) and skip the global JSON limit.
	LargeBodyPrefixes []string
	// Kinds are the module's durable job kinds (claim engine), periodic
	// ones included; `serve`, `dev` and `worker` run them (see RunJobs).
	Kinds []claim.Kind
	// Mounted is told the first path segments of every route the process
	// serves (RouteSegments), once every module's routes are mounted: a
	// module whose names share the URL space with the routes (short-link
	// aliases) keeps them apart without a hand-kept list.
	Mounted func(firstSegments []string)
}

// BuildService is a module's Build in the shape most modules share: read
// the module's settings (load), make its service from the shared
// dependencies and those settings (newService), then describe the runtime
// from the three (runtime). The first error stops the build, as `serve`
// must not start with a module half-configured.
func BuildService[C, S any](load func(Config) (C, error), newService func(Deps, C) (S, error),
	runtime func(Deps, C, S) (Runtime, error)) func(Deps) (Runtime, error) {
	return func(d Deps) (Runtime, error) {
		cfg, err := load(d.Config)
		if err != nil {
			return Runtime{}, err
		}
		svc, err := newService(d, cfg)
		if err != nil {
			return Runtime{}, err
		}
		return runtime(d, cfg, svc)
	}
}

// Merge combines runtimes into one (a module built from parts): routes,
// tasks, kinds and large-body prefixes of every part, seeds in order.
func Merge(parts ...Runtime) Runtime {
	var r Runtime
	for _, p := range parts {
		r.Tasks = append(r.Tasks, p.Tasks...)
		r.Kinds = append(r.Kinds, p.Kinds...)
		r.LargeBodyPrefixes = append(r.LargeBodyPrefixes, p.LargeBodyPrefixes...)
	}
	r.Routes = func(e *echo.Echo) {
		for _, p := range parts {
			if p.Routes != nil {
				p.Routes(e)
			}
		}
	}
	r.Mounted = func(segments []string) {
		for _, p := range parts {
			if p.Mounted != nil {
				p.Mounted(segments)
			}
		}
	}
	r.Seed = func(ctx context.Context) error {
		for _, p := range parts {
			if p.Seed != nil {
				if err := p.Seed(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return r
}

// Running is a module built for this process: its static fields and its
// runtime part.
type Running struct {
	Module
	Runtime
}

// Bench is one `fencelab bench NAME`. Run receives the module list so that
// it builds the very process `serve` runs (app.Build) without importing
// the package that lists the modules: bench packages import the services
// they load, and the composition root (program) lists both, so an import
// the other way would be a cycle.
type Bench struct {
	Name    string
	Summary string // one line for `fencelab bench --help`
	Run     func(mods []Module, args []string) error
}

// Invariants builds the registry of mods' invariants, with the schema's
// own (invariant.Core) first.
func Invariants(mods []Module) (*invariant.Registry, error) {
	lists := [][]invariant.Invariant{invariant.Core}
	for _, m := range mods {
		lists = append(lists, m.Invariants)
	}
	return invariant.NewRegistry(lists...)
}

// Errors builds the error table of mods, in module order.
func Errors(mods []Module) *httpx.Errors {
	var lists [][]httpx.ErrorMapping
	for _, m := range mods {
		lists = append(lists, m.Errors)
	}
	return httpx.NewErrors(lists...)
}
