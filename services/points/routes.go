package points

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

// routes is the module's route table. Auth comes first on every route:
// idempotency keys are scoped per verified subject.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth, keys *idem.Keys) {
	signedIn := auth.Require()
	admin := auth.Require(httpx.RoleAdmin)
	e.POST("/points/accounts", h.createAccount, admin, keys.Optional("points.accounts"))
	e.GET("/points/accounts/:id", h.account, signedIn)
	e.GET("/points/accounts/:id/entries", h.entries, signedIn)
	e.POST("/points/accounts/:id/debits", h.debit, auth.Require(httpx.RoleUser), keys.Require("points.debit"))
	e.POST("/points/accounts/:id/grants", h.grant, auth.Require(httpx.RoleAdmin, httpx.RoleService), keys.Require("points.grant"))
	e.POST("/points/admin/recompute", h.recompute, admin, httpx.NoBody)
}
