package points

import (
	"context"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

type handlers struct{ svc *Service }

func (h *handlers) createAccount(c echo.Context) error {
	var req CreateAccountRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		a, err := h.svc.CreateAccount(ctx, tx, req)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, a, nil
	})
}

func (h *handlers) account(c echo.Context) error {
	a, err := h.svc.Account(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, a)
}

func (h *handlers) entries(c echo.Context) error {
	limit := defaultPageSize
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			n = -1 // Entries refuses it with the bounds in the message
		}
		limit = n
	}
	page, err := h.svc.Entries(c.Request().Context(), httpx.PrincipalOf(c), c.Param("id"), c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, page)
}

// debit and grant validate before idem.Handle: a refused body is not
// recorded, so the client may fix it and reuse the key. Everything decided
// against the database (404, 403, 409 insufficient_balance) is an answer
// that idem records and replays.
func (h *handlers) debit(c echo.Context) error {
	return h.post(c, h.svc.debit)
}

func (h *handlers) grant(c echo.Context) error {
	return h.post(c, h.svc.grant)
}

// postFunc is a debit or a grant that also returns the transaction's JSON:
// the response body, byte for byte the outbox event's payload.
type postFunc func(ctx context.Context, tx pgx.Tx, actor, key, id string, req PostingRequest) (Txn, []byte, error)

func (h *handlers) post(c echo.Context, fn postFunc) error {
	var req PostingRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	id := c.Param("id")
	if err := validatePosting(id, req); err != nil {
		return err
	}
	actor, key := httpx.PrincipalOf(c).Subject, idem.KeyOf(c)
	return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		_, body, err := fn(ctx, tx, actor, key, id, req)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, body, nil
	})
}

// recompute: POST /points/admin/recompute[?account=ID][&repair=true].
func (h *handlers) recompute(c echo.Context) error {
	repair := false
	if s := c.QueryParam("repair"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return httpx.BadRequest("invalid_repair", "repair must be true or false")
		}
		repair = b
	}
	rep, err := h.svc.Recompute(c.Request().Context(), httpx.PrincipalOf(c).Subject, c.QueryParam("account"), repair)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}
