package report

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
)

// New builds the report module: GET /reports/{date} and the daily-report
// background task, configured by LoadConfig.
func New(d app.Deps) (app.Module, error) {
	cfg, err := LoadConfig(d.Config)
	if err != nil {
		return app.Module{}, err
	}
	svc, err := NewService(d, cfg)
	if err != nil {
		return app.Module{}, err
	}
	return app.Module{
		Name:   "report",
		Routes: func(e *echo.Echo) { routes(e, d.Auth, handlers{svc}) },
		Tasks:  []app.Task{svc.Task()},
	}, nil
}
