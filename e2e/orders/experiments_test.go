// Package orders_test runs the orders chapter's experiments (defined in
// lab/orders/lab.go) against the real app, real PostgreSQL
// and a real fake payment channel on loopback.
package orders_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	orders "github.com/fencelab/fencelab/lab/orders"
)

func TestExperiments(t *testing.T) { e2etest.Experiments(t, orders.Experiments) }
