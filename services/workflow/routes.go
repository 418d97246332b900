package workflow

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

// routes is the module's route table. A run's progress is GET /jobs/{id}.
func routes(e *echo.Echo, auth *httpx.Auth, s *service) {
	h := &handlers{s: s}
	e.POST("/workflows", h.start, auth.Require(httpx.RoleAdmin, httpx.RoleService))
}
