package report_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/services/report"
)

func TestParseDateAcceptsOnlyRealDays(t *testing.T) {
	t.Parallel()
	d, err := report.ParseDate("2026-05-01")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), d)
	require.Equal(t, "report:2026-05-01", report.LeaseName(d))
	require.Equal(t, "report_output:2026-05-01", report.Resource(d))

	for _, bad := range []string{"", "2026-13-01", "2026-02-29", "2026-5-1", "26-05-01", "0000-01-01",
		"2026-05-01T00:00:00Z", " 2026-05-01", "today", "2026/05/01"} {
		_, err := report.ParseDate(bad)
		require.ErrorIs(t, err, report.ErrInvalidDate, "%q", bad)
	}
}

func TestBadConfigIsAnErrorNotAPanic(t *testing.T) {
	t.Parallel()
	for _, c := range []report.Config{
		{TTL: -time.Second},
		{TTL: time.Microsecond},
		{TTL: 48 * time.Hour},
		{Interval: -time.Second},
		{Interval: time.Millisecond},
		{Interval: 25 * time.Hour},
		{Holder: string(make([]byte, 201))},
		{Holder: "worker\x00a"},
		{Retention: time.Hour},
		{Retention: -report.DefaultRetention},
		{Retention: 11 * 365 * 24 * time.Hour},
	} {
		_, err := report.NewService(app.Standalone(nil), c)
		require.Error(t, err, "%+v", c)
	}
	svc, err := report.NewService(app.Standalone(nil), report.Config{})
	require.NoError(t, err, "zero values take the defaults")
	require.NotEmpty(t, svc.Holder())
}

func TestLoadConfigRefusesABadDate(t *testing.T) {
	t.Parallel()
	ac := app.Defaults()
	ac.Settings = map[string]string{"FENCELAB_REPORT_DATE": "2026-02-30"}
	_, err := report.LoadConfig(ac)
	require.ErrorIs(t, err, report.ErrInvalidDate)

	ac.Settings = map[string]string{"FENCELAB_REPORT_TTL": "soon"}
	_, err = report.LoadConfig(ac)
	require.ErrorContains(t, err, "FENCELAB_REPORT_TTL")
	for _, bad := range []string{"1h", "0s", "-400h", "100000h", "forever"} {
		ac.Settings = map[string]string{report.EnvRetention: bad}
		_, err = report.LoadConfig(ac)
		require.ErrorContains(t, err, report.EnvRetention, bad)
	}

	ac.Settings = map[string]string{
		"FENCELAB_REPORT_DATE": "2026-05-01", "FENCELAB_REPORT_HOLDER": "worker-a",
		"FENCELAB_REPORT_TTL": "2s", "FENCELAB_REPORT_INTERVAL": "50ms",
	}
	c, err := report.LoadConfig(ac)
	require.NoError(t, err)
	require.Equal(t, report.Config{Holder: "worker-a", TTL: 2 * time.Second, Interval: 50 * time.Millisecond,
		Retention: report.DefaultRetention, Date: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}, c)
	ac.Settings = map[string]string{report.EnvRetention: "720h"}
	c, err = report.LoadConfig(ac)
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, c.Retention)
}
