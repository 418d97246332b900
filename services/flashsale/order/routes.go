package order

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

// routes is the order layer's route table. Buyers act as the token's
// subject; the channel authenticates its callbacks with their signature
// (ORD-O5), not a bearer token; reconciliation is internal.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth, keys *idem.Keys) {
	e.POST("/flashsale/orders", h.create, auth.Require(httpx.RoleUser), keys.Optional("flashsale.orders"))
	e.GET("/flashsale/orders/:id", h.get, auth.Require())
	e.POST("/flashsale/orders/:id/pay", h.pay, auth.Require(httpx.RoleUser))
	e.POST(CallbackPath, h.callback)
	e.POST("/flashsale/admin/reconcile", h.reconcile, auth.Require(httpx.RoleAdmin, httpx.RoleService), httpx.NoBody)
}
