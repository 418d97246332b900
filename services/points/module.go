// Package points is the points ledger (chapter 5,
// docs/chapters/05-points.md): simulated points in double entry, answering three questions
// with a check and a test each — concurrent debits never overdraw an
// account (PTS-I1), a client that times out and retries is never debited
// twice (PTS-I2), and a corrupted balance column is recomputed from the
// append-only ledger (PTS-I3..I5).
package points

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
)

// Module is points: the points ledger.
func Module() app.Module {
	return app.Module{
		Name: "points", Chapter: "points",
		Invariants: Invariants, Errors: Errors,
		Build: app.BuildService(LoadConfig, NewService, runtime),
	}
}

// runtime is the module's part of a process: its routes and demo seed.
func runtime(d app.Deps, _ Config, svc *Service) (app.Runtime, error) {
	h := &handlers{svc: svc}
	keys := d.Keys()
	return app.Runtime{
		Routes: func(e *echo.Echo) { routes(e, h, d.Auth, keys) },
		Seed:   svc.seed,
	}, nil
}
