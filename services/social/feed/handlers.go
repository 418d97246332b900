package feed

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
)

type handlers struct{ svc *Service }

// feed is GET /social/feed?cursor=&limit=&strategy=: a page of the
// subject's home feed.
func (h *handlers) feed(c echo.Context) error {
	q := Query{Strategy: c.QueryParam("strategy"), Cursor: c.QueryParam("cursor")}
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return errInvalidLimit
		}
		q.Limit = n
	}
	p, err := h.svc.Read(c.Request().Context(), httpx.PrincipalOf(c).Subject, q)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, p)
}
