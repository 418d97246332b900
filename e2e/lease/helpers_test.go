package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

var ctx = context.Background()

// The day every experiment reports on: pinned, so no test depends on the
// calendar.
var day = mustDate("2026-05-01")

func mustDate(s string) time.Time {
	d, err := report.ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

// instance is one report-job instance of the app under test, as a separate
// deployment would run it: its own holder identity, the app's pool and
// fault points. out == nil means the production (fenced) output.
func instance(t *testing.T, a *e2etest.App, holder string, out report.Output) *report.Service {
	t.Helper()
	svc, err := report.NewService(a.Deps, report.Config{Holder: holder, TTL: time.Hour, Interval: time.Minute, Output: out})
	require.NoError(t, err)
	return svc
}
