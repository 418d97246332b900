package like

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

type handlers struct{ svc *Service }

// set likes or unlikes the item in the path as the token's subject. The
// routes take no body: a body (say, a "user_id" naming someone else) is
// refused, not ignored.
func (h *handlers) set(liked bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		item, err := httpx.ParamID(c, "id")
		if err != nil {
			return err
		}
		if err := httpx.EmptyBody(c); err != nil {
			return err
		}
		f, err := h.svc.Set(c.Request().Context(), httpx.PrincipalOf(c).Subject, item, liked)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, f)
	}
}

// likes answers the item's count, its pending events and error bound.
func (h *handlers) likes(c echo.Context) error {
	item, err := httpx.ParamID(c, "id")
	if err != nil {
		return err
	}
	l, err := h.svc.Likes(c.Request().Context(), httpx.PrincipalOf(c).Subject, item)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, l)
}

// recompute recounts every item (or ?item=ID) from the facts beside the
// running counter.
func (h *handlers) recompute(c echo.Context) error {
	var item int64
	if s := c.QueryParam("item"); s != "" {
		var err error
		if item, err = itemParam(s); err != nil {
			return err
		}
	}
	rc, err := h.svc.Recompute(c.Request().Context(), item)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rc)
}

func itemParam(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, ErrInvalidItem
	}
	return id, nil
}
