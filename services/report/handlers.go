package report

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

type handlers struct{ svc *Service }

// get answers GET /reports/{date}: the stored content, the fence it was
// written under and the holder that wrote it.
func (h handlers) get(c echo.Context) error {
	day, err := ParseDate(c.Param("date"))
	if err != nil {
		return err
	}
	r, err := h.svc.Get(c.Request().Context(), day)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r.View())
}
