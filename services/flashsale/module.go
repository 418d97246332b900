// Package flashsale is the flash-sale service (chapters 6 and 7,
// reservations and orders): 40 units of sku-lab-01 and
// hundreds of buyers. Part A, reservations, lives in reserve: admission
// control, holds that never oversell, exact release of expired holds.
// Part B, orders and payment, builds on reserve.Inventory without
// changing it, as the book does.
package flashsale

import (
	"context"
	"slices"

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

// Module is the flash sale: reservations (chapter 6) and orders with an
// uncertain payment channel (chapter 7), one module because orders build
// on the reservations' Inventory.
func Module() app.Module {
	return app.Module{
		Name:       "flashsale",
		Invariants: slices.Concat(reserve.Invariants, order.Invariants),
		Errors:     slices.Concat(reserve.Errors, order.Errors),
		Build:      build,
	}
}

// build makes the flash-sale runtime from the shared dependencies.
func build(d app.Deps) (app.Runtime, error) {
	rcfg, err := reserve.LoadConfig(d.Config)
	if err != nil {
		return app.Runtime{}, err
	}
	ocfg, err := order.LoadConfig(d.Config)
	if err != nil {
		return app.Runtime{}, err
	}
	res, err := reserve.NewService(d, rcfg)
	if err != nil {
		return app.Runtime{}, err
	}
	ord, err := order.NewService(d, ocfg, res.Inventory())
	if err != nil {
		return app.Runtime{}, err
	}
	return app.Runtime{
		Routes: func(e *echo.Echo) { res.Routes(e); ord.Routes(e) },
		Kinds:  append(res.Kinds(), ord.Kinds()...),
		Seed: func(ctx context.Context) error {
			_, err := res.Inventory().CreateSKU(ctx, d.Pool, DemoSKU, DemoUnits)
			return err
		},
	}, nil
}
