package order

import (
	"context"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
)

type handlers struct{ svc *Service }

// create answers POST /flashsale/orders {"reservation_id": n}: 201 with
// the new CREATED order, 200 with the reservation's existing order (one
// per reservation), 403 not your reservation, 404 no such reservation,
// 409 reservation_not_held. An Idempotency-Key is honoured (a retry gets
// the first answer byte for byte) but not required: the reservation's
// unique order already makes a retry harmless.
func (h *handlers) create(c echo.Context) error {
	var req CreateRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	if req.ReservationID <= 0 {
		return httpx.Invalid("invalid_reservation_id", "reservation_id must be a positive integer")
	}
	user := httpx.PrincipalOf(c).Subject
	return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		o, created, err := h.svc.Create(ctx, tx, user, req.ReservationID)
		if err != nil {
			return 0, nil, err
		}
		if created {
			return http.StatusCreated, o, nil
		}
		return http.StatusOK, o, nil
	})
}

// get answers GET /flashsale/orders/{id} for the owner or an admin: the
// order, every attempted move (applied or refused) and every report of
// the channel.
func (h *handlers) get(c echo.Context) error {
	id, err := orderID(c)
	if err != nil {
		return err
	}
	v, err := h.svc.View(c.Request().Context(), httpx.PrincipalOf(c), id)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	return c.JSON(http.StatusOK, v)
}

// pay answers POST /flashsale/orders/{id}/pay for the owner: 202 with the
// order still PAYING (the channel settles it by callback, or
// reconciliation by query), 200 once it is settled; 409
// payment_in_progress, order_not_payable or hold_ended. The order itself
// makes the route idempotent: only a CREATED order can start paying, and
// its charge key makes every attempt the same charge.
func (h *handlers) pay(c echo.Context) error {
	id, err := orderID(c)
	if err != nil {
		return err
	}
	o, err := h.svc.Pay(c.Request().Context(), httpx.PrincipalOf(c), id)
	if err != nil {
		return err
	}
	httpx.NoStore(c)
	if o.State == StatePaying {
		return c.JSON(http.StatusAccepted, o)
	}
	return c.JSON(http.StatusOK, o)
}

// callback answers POST /flashsale/payments/callback from the channel:
// 200 {"event_id","order_id","state","duplicate"}; 401 forged or stale;
// 400 malformed; 404 no such order; 409 the event id with another body;
// 422 another charge than the order's.
func (h *handlers) callback(c echo.Context) error {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxCallbackBytes+1))
	if err != nil {
		return httpx.ReadProblem(err) // 413 past the body limit, 408 a body that trickled past its deadline
	}
	if len(body) > MaxCallbackBytes {
		return httpx.NewProblem(http.StatusRequestEntityTooLarge, "body_too_large", "a callback is at most %d bytes", MaxCallbackBytes)
	}
	ans, err := h.svc.Callback(c.Request().Context(), c.Request().Header.Get(fakeprovider.SignatureHeader), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ans)
}

// reconcile answers POST /flashsale/admin/reconcile: one run, with what it
// did.
func (h *handlers) reconcile(c echo.Context) error {
	res, err := h.svc.Reconcile(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// orderID reads the order id under the one rule for path ids
// (httpx.ParamID: 400 invalid_id when malformed).
func orderID(c echo.Context) (int64, error) { return httpx.ParamID(c, "id") }
