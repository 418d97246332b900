package reserve

import (
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

// routes is the reservation layer's route table. Users reserve as the
// token's subject; internal runs need admin or service.
func routes(e *echo.Echo, h *handlers, auth *httpx.Auth) {
	internal := auth.Require(httpx.RoleAdmin, httpx.RoleService)
	// shed first: when the line is full the answer is 503 whoever asks,
	// so it is given before the token is verified or the body read.
	e.POST("/flashsale/reservations", h.reserve, h.shed, auth.Require(httpx.RoleUser))
	e.GET("/flashsale/reservations/:id", h.get, auth.Require())
	e.GET("/flashsale/skus/:sku", h.stock)
	e.POST("/flashsale/admin/release-expired", h.releaseExpired, internal, httpx.NoBody)
	e.GET("/flashsale/admin/admission", h.admission, internal)
}
