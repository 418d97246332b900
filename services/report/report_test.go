package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
)

func TestParseDateAcceptsOnlyRealDays(t *testing.T) {
	t.Parallel()
	d, err := ParseDate("2026-05-01")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), d)
	require.Equal(t, "report:2026-05-01", LeaseName(d))
	require.Equal(t, "report_output:2026-05-01", resource(d))

	for _, bad := range []string{"", "2026-13-01", "2026-02-29", "2026-5-1", "26-05-01", "0000-01-01",
		"2026-05-01T00:00:00Z", " 2026-05-01", "today", "2026/05/01"} {
		_, err := ParseDate(bad)
		require.ErrorIs(t, err, errInvalidDate, "%q", bad)
	}
}

func TestBadConfigIsAnErrorNotAPanic(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{TTL: -time.Second},
		{TTL: time.Microsecond},
		{TTL: 48 * time.Hour},
		{Interval: -time.Second},
		{Interval: time.Millisecond},
		{Interval: 25 * time.Hour},
		{Holder: string(make([]byte, 201))},
		{Holder: "worker\x00a"},
		{Retention: time.Hour},
		{Retention: -defaultRetention},
		{Retention: 11 * 365 * 24 * time.Hour},
	} {
		_, err := NewService(app.Standalone(nil), c)
		require.Error(t, err, "%+v", c)
	}
	svc, err := NewService(app.Standalone(nil), Config{})
	require.NoError(t, err, "zero values take the defaults")
	require.NotEmpty(t, svc.Holder())
}

func TestLoadConfigRefusesABadDate(t *testing.T) {
	t.Parallel()
	ac := app.Defaults()
	ac.Settings = map[string]string{"FENCELAB_REPORT_DATE": "2026-02-30"}
	_, err := loadConfig(ac)
	require.ErrorIs(t, err, errInvalidDate)

	ac.Settings = map[string]string{"FENCELAB_REPORT_TTL": "soon"}
	_, err = loadConfig(ac)
	require.ErrorContains(t, err, "FENCELAB_REPORT_TTL")
	for _, bad := range []string{"1h", "0s", "-400h", "100000h", "forever"} {
		ac.Settings = map[string]string{envRetention: bad}
		_, err = loadConfig(ac)
		require.ErrorContains(t, err, envRetention, bad)
	}

	ac.Settings = map[string]string{
		"FENCELAB_REPORT_DATE": "2026-05-01", "FENCELAB_REPORT_HOLDER": "worker-a",
		"FENCELAB_REPORT_TTL": "2s", "FENCELAB_REPORT_INTERVAL": "50ms",
	}
	c, err := loadConfig(ac)
	require.NoError(t, err)
	require.Equal(t, Config{Holder: "worker-a", TTL: 2 * time.Second, Interval: 50 * time.Millisecond,
		Retention: defaultRetention, Date: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}, c)
	ac.Settings = map[string]string{envRetention: "720h"}
	c, err = loadConfig(ac)
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, c.Retention)
}
