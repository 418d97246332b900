package rel

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

// routes is rel's route table. Every route acts as the token's subject:
// no route takes the acting user from the path, the query or the body.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth, keys *idem.Keys) {
	user := auth.Require(httpx.RoleUser)
	e.GET("/social/me", h.me, user)
	e.PUT("/social/me", h.setProfile, user)

	e.POST("/social/users/:id/follow", h.op(OpFollow), user)
	e.POST("/social/users/:id/unfollow", h.op(OpUnfollow), user)
	e.POST("/social/users/:id/block", h.op(OpBlock), user)
	e.POST("/social/users/:id/unblock", h.op(OpUnblock), user)
	e.GET("/social/users/:id/relation", h.relation, user)
	e.GET("/social/requests", h.requests, user)
	e.POST("/social/requests/:id/approve", h.op(OpApprove), user)
	e.POST("/social/requests/:id/reject", h.op(OpReject), user)

	e.GET("/social/users/:id/followers", h.followers, user)
	e.GET("/social/users/:id/following", h.following, user)
	e.GET("/social/users/:id/counts", h.counts, user)
	e.GET("/social/users/:id/posts", h.timeline, user)

	e.POST("/social/posts", h.createPost, user, keys.Optional("social.posts"))
	e.GET("/social/posts/:id", h.readPost, user)
	e.PATCH("/social/posts/:id", h.setVisibility, user)

	e.GET("/social/views", h.views, auth.Require(httpx.RoleAdmin))
}
