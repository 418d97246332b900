// Package flashsale is the flash-sale service (spec 30; the book's
// reservation and order/payment chapters): 40 units of sku-lab-01 and
// hundreds of buyers. Part A, reservations, lives in reserve: admission
// control, holds that never oversell, exact release of expired holds.
// Part B, orders and payment, builds on reserve.Inventory without
// changing it, as the book does.
package flashsale

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// The demo sale `fencelab dev` seeds.
const (
	DemoSKU   = "sku-lab-01"
	DemoUnits = 40
)

// New builds the flash-sale module from the shared dependencies.
func New(d app.Deps) (app.Module, error) {
	res, err := reserve.New(d)
	if err != nil {
		return app.Module{}, err
	}
	ord, err := order.New(d, res.Inventory())
	if err != nil {
		return app.Module{}, err
	}
	return app.Module{
		Name:   "flashsale",
		Routes: func(e *echo.Echo) { res.Routes(e); ord.Routes(e) },
		Kinds:  append(res.Kinds(), ord.Kinds()...),
		Seed: func(ctx context.Context) error {
			_, err := res.Inventory().CreateSKU(ctx, d.Pool, DemoSKU, DemoUnits)
			return err
		},
	}, nil
}
