package flashsale_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/flashsale"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

const sku = flashsale.DemoSKU

// start runs the app with flashsale settings (FENCELAB_FLASHSALE_*) on a
// fresh database and seeds the demo sale: 40 units of sku-lab-01.
func start(t *testing.T, settings map[string]string) *e2etest.App {
	t.Helper()
	a := e2etest.Start(t, e2etest.Options{Settings: settings})
	seed(t, a)
	return a
}

// seed runs the module's dev seed.
func seed(t *testing.T, a *e2etest.App) {
	t.Helper()
	for _, m := range a.Mods {
		if m.Name == "flashsale" {
			require.NoError(t, m.Seed(context.Background()))
			return
		}
	}
	t.Fatal("no flashsale module")
}

func user(i int) string { return fmt.Sprintf("user-%04d", i) }

func userToken(t *testing.T, a *e2etest.App, sub string) string {
	t.Helper()
	return a.Token(t, sub, httpx.RoleUser)
}

func reserveReq(tok, sku, key string) e2etest.Req {
	return e2etest.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok,
		Body: reserve.ReserveRequest{SKU: sku, RequestKey: key}}
}

func getReq(tok string, id int64) e2etest.Req {
	return e2etest.Req{Method: http.MethodGet, Path: "/flashsale/reservations/" + strconv.FormatInt(id, 10), Token: tok}
}

func decode(t *testing.T, r e2etest.Response) reserve.Reservation {
	t.Helper()
	var res reserve.Reservation
	r.JSON(t, &res)
	return res
}

// stock reads GET /flashsale/skus/{sku}.
func stock(t *testing.T, a *e2etest.App, sku string) reserve.Stock {
	t.Helper()
	r := a.Do(t, e2etest.Req{Method: http.MethodGet, Path: "/flashsale/skus/" + sku})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var s reserve.Stock
	r.JSON(t, &s)
	return s
}

// count runs a counting query against the app's database.
func count(t *testing.T, a *e2etest.App, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, a.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// Server-side admission gauges of the reservation limiter, and the
// database concurrency measured around the hold itself.
func inUse(t *testing.T, a *e2etest.App) int {
	return int(a.Gauge(t, "fencelab_admission_in_use", "limiter", reserve.LimiterName))
}

func waiting(t *testing.T, a *e2etest.App) int {
	return int(a.Gauge(t, "fencelab_admission_waiting", "limiter", reserve.LimiterName))
}

func peakInDB(t *testing.T, a *e2etest.App) int {
	return int(a.Gauge(t, "fencelab_flashsale_reservation_ops_in_db_peak"))
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }
