package notify

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

// routes is the module's route table. Events come from services; a user
// manages their own preferences and reads their own notifications; the
// review queue is for admins, and every decision is recorded under the
// admin's verified subject.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth, keys *idem.Keys) {
	e.POST("/notify/events", h.submit, auth.Require(httpx.RoleService), keys.Optional("notify.events"))
	e.GET("/notify/notifications/:id", h.notification, auth.Require())
	e.PUT("/notify/users/:id/preferences", h.putPreferences, auth.Require(httpx.RoleUser, httpx.RoleAdmin))
	e.GET("/notify/users/:id/preferences", h.getPreferences, auth.Require())
	e.GET("/notify/review", h.reviewQueue, auth.Require(httpx.RoleAdmin))
	e.POST("/notify/review/:task/resolve", h.resolve, auth.Require(httpx.RoleAdmin), keys.Optional("notify.review"))
	// dev: make the in-process fake channel drop or refuse its next calls
	e.POST("/notify/admin/loopback/:channel/faults", h.loopbackFault, auth.Require(httpx.RoleAdmin))
}
