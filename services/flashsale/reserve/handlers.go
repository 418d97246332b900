package reserve

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

type handlers struct{ svc *service }

// reserve answers POST /flashsale/reservations: 201 with the new HELD
// reservation; 200 with Idempotent-Replayed: true when the request key
// already made one (its state now, which may have moved on); 409
// sold_out or already_holding; 422 request_key_reused; 503 overloaded.
//
// The request key is the book's request_key in the body. Idempotency-Key
// is accepted in its place (or alongside it, if equal). The route does not
// use core/idem's record: the reservation's own unique request_key is the
// record, checked in the hold's transaction, and a second committed
// transaction per request is what the limiter is there to save.
func (h *handlers) reserve(c echo.Context) error {
	var req ReserveRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	key := req.RequestKey
	if hk := c.Request().Header.Get(idem.Header); hk != "" {
		if len(hk) >= 2 && hk[0] == '"' && hk[len(hk)-1] == '"' {
			hk = hk[1 : len(hk)-1] // the draft's quoted form, as core/idem accepts it
		}
		if key != "" && key != hk {
			return errRequestKeyMismatch
		}
		key = hk
	}
	r, created, err := h.svc.reserveHold(c.Request().Context(), HoldRequest{
		UserID: httpx.PrincipalOf(c).Subject, SKU: req.SKU, RequestKey: key,
	})
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	c.Response().Header().Set(echo.HeaderLocation, "/flashsale/reservations/"+strconv.FormatInt(r.ID, 10))
	if !created {
		c.Response().Header().Set(idem.ReplayedHeader, "true")
		return c.JSON(http.StatusOK, r)
	}
	return c.JSON(http.StatusCreated, r)
}

// shed answers 503 overloaded at once when the limiter is full (FS-R4),
// before any other work on the request.
func (h *handlers) shed(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := h.svc.limiter.Shed(); err != nil {
			h.svc.m.outcome(err)
			return err
		}
		return next(c)
	}
}

// get answers GET /flashsale/reservations/{id} for the owner (or an admin).
func (h *handlers) get(c echo.Context) error {
	id, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	r, err := h.svc.getOwned(c.Request().Context(), httpx.PrincipalOf(c), id)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, r)
}

// stock answers GET /flashsale/skus/{sku}: stock, available, held,
// confirmed. Public: what is left of a sale is no secret.
func (h *handlers) stock(c echo.Context) error {
	st, err := h.svc.stockOf(c.Request().Context(), c.Param("sku"))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, st)
}

// releaseExpired answers POST /flashsale/admin/release-expired: one run of
// the release, {"released": n}.
func (h *handlers) releaseExpired(c echo.Context) error {
	n, err := h.svc.releaseDue(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]int{"released": n})
}

// admission answers GET /flashsale/admin/admission: the limiter's state
// and the measured database concurrency of this process.
func (h *handlers) admission(c echo.Context) error {
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, h.svc.admissionState())
}
