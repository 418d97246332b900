package shortlink

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

type handlers struct{ svc *Service }

// redirect answers GET /s/{code}: 302 to the target, 404 unknown, 410
// revoked or expired. No authentication: anyone holding the link may
// follow it.
func (h *handlers) redirect(c echo.Context) error {
	visit := h.svc.Visit
	if c.Request().Method == http.MethodHead {
		visit = h.svc.peek
	}
	target, err := visit(c.Request().Context(), c.Param("code"))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusFound, target)
}

func (h *handlers) create(c echo.Context) error {
	var req CreateRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	l, err := h.svc.Create(c.Request().Context(), httpx.PrincipalOf(c).Subject, req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/shortlink/links/"+l.Code)
	return c.JSON(http.StatusCreated, h.withShortURL(l))
}

func (h *handlers) get(c echo.Context) error {
	l, err := h.svc.Get(c.Request().Context(), httpx.PrincipalOf(c), c.Param("code"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.withShortURL(l))
}

func (h *handlers) revoke(c echo.Context) error {
	l, err := h.svc.Revoke(c.Request().Context(), httpx.PrincipalOf(c), c.Param("code"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.withShortURL(l))
}

func (h *handlers) stats(c echo.Context) error {
	st, err := h.svc.Stats(c.Request().Context(), httpx.PrincipalOf(c), c.Param("code"))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, st)
}

// withShortURL fills the link's public URL from the configured base URL
// (never from the request's Host header, which the client chooses).
func (h *handlers) withShortURL(l Link) Link {
	l.ShortURL = h.svc.baseURL + "/s/" + l.Code
	return l
}
