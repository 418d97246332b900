package feed

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

// routes is feed's route table: the reader is the token's subject.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth) {
	e.GET("/social/feed", h.feed, auth.Require(httpx.RoleUser))
}
