// Package services lists every module of the deployable. It is the only
// package that knows them all; `fencelab` and the e2e tests build the
// process from this list, and importing it registers every module's
// invariants for `fencelab check`.
package services

import (
	"github.com/fencelab/fencelab/api"
	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/services/flashsale"
	"github.com/fencelab/fencelab/services/notify"
	"github.com/fencelab/fencelab/services/points"
	"github.com/fencelab/fencelab/services/report"
	"github.com/fencelab/fencelab/services/shortlink"
	"github.com/fencelab/fencelab/services/social"
	"github.com/fencelab/fencelab/services/upload"
	"github.com/fencelab/fencelab/services/workflow"
)

// All builds every module from the shared dependencies, in mount order.
func All(d app.Deps) ([]app.Module, error) {
	var mods []app.Module
	for _, build := range builders {
		m, err := build(d)
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	if err := app.RegisterKinds(d, mods); err != nil {
		return nil, err
	}
	return mods, nil
}

// builders is the module table: one line per module.
var builders = []func(app.Deps) (app.Module, error){
	idem.Module,   // core §3: retention purge, idempotency metrics
	outbox.Module, // core §4: GET /outbox/consumers, lag metrics, the demo consumer (FENCELAB_OUTBOX_DEMO=1)
	report.New,    // distributed lock: the daily report written through the fence guard
	workflow.New,  // chapter 14: the workflow kind and its tool
	points.New,    // points ledger
	flashsale.New, // reservations and orders with payment
	social.New,    // relations, home feed, like counters
	notify.New,    // notifications: intake, preferences, delivery by channel contract, review
	shortlink.New, // short links
	upload.New,    // chunked upload
	api.Module,    // the HTTP contract: GET /openapi.json, /openapi.yaml, /docs/api
}
