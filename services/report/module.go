package report

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
)

// Module is report: the daily report written through the fence guard (LOCK-I2): chapter 1 applied.
func Module() app.Module {
	return app.Module{
		Name: "report", Chapter: "lease",
		Invariants: Invariants, Errors: Errors, Build: build,
	}
}

// build builds the report module: GET /reports/{date}, the daily-report
// background task and the report.purge retention, configured by loadConfig.
func build(d app.Deps) (app.Runtime, error) {
	cfg, err := loadConfig(d.Config)
	if err != nil {
		return app.Runtime{}, err
	}
	svc, err := NewService(d, cfg)
	if err != nil {
		return app.Runtime{}, err
	}
	return app.Runtime{
		Routes: func(e *echo.Echo) { routes(e, d.Auth, handlers{svc}) },
		Tasks:  []app.Task{svc.task()},
		Kinds:  []claim.Kind{svc.purgeKind()},
	}, nil
}
