package shortlink

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

// routes is the module's route table. Every /shortlink route acts as the
// token's subject; the redirect is public.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth) {
	signedIn := auth.Require()
	e.GET("/s/:code", h.redirect)
	e.HEAD("/s/:code", h.redirect) // link checkers ask HEAD: same status and Location, no body
	e.POST("/shortlink/links", h.create, signedIn)
	e.GET("/shortlink/links/:code", h.get, signedIn)
	e.POST("/shortlink/links/:code/revoke", h.revoke, signedIn)
	e.GET("/shortlink/links/:code/stats", h.stats, signedIn)
}
