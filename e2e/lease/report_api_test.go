package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

func TestReportEndpointValidatesAndAuthenticates(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	tok := a.Token(t, "user-0042", httpx.RoleUser)

	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/reports/2026-05-01"})
	require.Equal(t, 401, r.Status, "reports need a token")

	for _, bad := range []string{"2026-13-01", "2026-02-30", "2026-5-1", "yesterday", "0000-01-01", "2026-05-01x", "%00"} {
		r := a.Do(t, e2etest.Req{Method: "GET", Path: "/reports/" + bad, Token: tok, Invalid: true})
		require.Equal(t, 400, r.Status, "%s: %s", bad, r.Body)
		want := "invalid_date"
		if bad == "%00" {
			want = "invalid_text" // a NUL is refused at the edge, before the route runs
		}
		require.Equal(t, want, r.Code(), bad)
	}

	r = a.Do(t, e2etest.Req{Method: "GET", Path: "/reports/2026-05-02", Token: tok})
	require.Equal(t, 404, r.Status)
	require.Equal(t, "report_not_found", r.Code())

	written, err := instance(t, a, "instance-a", nil).Run(ctx, day)
	require.NoError(t, err)
	_, err = instance(t, a, "instance-b", nil).Run(ctx, day)
	require.ErrorIs(t, err, report.ErrAlreadyWritten, "a written day is not recomputed")

	r = a.Do(t, e2etest.Req{Method: "GET", Path: "/reports/2026-05-01", Token: tok})
	require.Equal(t, 200, r.Status, string(r.Body))
	var v report.View
	r.JSON(t, &v)
	require.Equal(t, "2026-05-01", v.Date)
	require.Equal(t, written.Content, v.Content)
	require.Equal(t, written.Fence, v.Fence)
	require.Equal(t, "instance-a", v.WrittenBy)
	require.False(t, v.WrittenAt.IsZero())
	e2etest.Assert(t, a.Pool, "lease", "report")
}

// The module is wired into the deployable: with background tasks on, the
// app writes today's report (by the database clock) on its own.
func TestTheAppWritesTodaysReportInTheBackground(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{Tasks: true})
	var today time.Time
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT current_date`).Scan(&today))
	tok := a.Token(t, "user-0042", httpx.RoleUser)
	var r e2etest.Response
	require.Eventually(t, func() bool {
		r = a.Do(t, e2etest.Req{Method: "GET", Path: "/reports/" + today.Format(report.DateLayout), Token: tok})
		return r.Status == 200
	}, 30*time.Second, 20*time.Millisecond)
	var v report.View
	r.JSON(t, &v)
	require.Equal(t, int64(1), v.Fence)
	require.Contains(t, v.Content, "1 lease grants recorded that day")
	e2etest.Assert(t, a.Pool, "lease", "report")
}
