package like

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

// routes is like's route table. Likes act as the token's subject; the
// recompute is an internal operation.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth) {
	user := auth.Require(httpx.RoleUser)
	e.POST("/social/items/:id/like", h.set(true), user)
	e.POST("/social/items/:id/unlike", h.set(false), user)
	e.GET("/social/items/:id/likes", h.likes, user)

	e.POST("/social/admin/likes/recompute", h.recompute, auth.Require(httpx.RoleAdmin, httpx.RoleService), httpx.NoBody)
}
