package report

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

func routes(e *echo.Echo, auth *httpx.Auth, h handlers) {
	e.GET("/reports/:date", h.get, auth.Require())
}
