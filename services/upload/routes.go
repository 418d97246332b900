package upload

import (
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/fencelab/fencelab/core/httpx"
)

// largeBodyPrefix is exempt from the global JSON body limit so chunk bodies
// can be streamed; the JSON routes under it get their own small limit.
const largeBodyPrefix = "/upload/sessions/"

// routes is the module's route table. Every route acts as the token's
// subject on its own sessions and files (admins may act on any); GC needs
// an admin or service token.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth) {
	signedIn := auth.Require()
	small := middleware.BodyLimit("64K")
	e.POST("/upload/sessions", h.createSession, signedIn)
	e.GET("/upload/sessions/:id", h.getSession, signedIn)
	e.PUT("/upload/sessions/:id/chunks/:n", h.putChunk, signedIn)
	e.POST("/upload/sessions/:id/complete", h.complete, signedIn, small)
	e.POST("/upload/sessions/:id/commit", h.commit, signedIn, small)
	e.DELETE("/upload/sessions/:id", h.abort, signedIn, small)
	e.GET("/upload/files/:id", h.read, signedIn)
	e.HEAD("/upload/files/:id", h.read, signedIn)
	e.GET("/upload/files/:id/info", h.fileInfo, signedIn)
	e.POST("/upload/gc", h.gc, auth.Require(httpx.RoleAdmin, httpx.RoleService), httpx.NoBody)
}
