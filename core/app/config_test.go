package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
)

// The typed environment readers keep the default for an unset or empty
// variable and parse a set one (a malformed one exits at start-up).
func TestEnvReadersParseOrKeepTheDefault(t *testing.T) {
	t.Setenv("FENCELAB_TEST_INT", "")
	require.Equal(t, 7, app.EnvInt("FENCELAB_TEST_INT", 7))
	t.Setenv("FENCELAB_TEST_INT", "42")
	require.Equal(t, 42, app.EnvInt("FENCELAB_TEST_INT", 7))
	t.Setenv("FENCELAB_TEST_BOOL", "TRUE")
	require.True(t, app.EnvBool("FENCELAB_TEST_BOOL", false))
	t.Setenv("FENCELAB_TEST_DUR", "250ms")
	require.Equal(t, 250*time.Millisecond, app.EnvDuration("FENCELAB_TEST_DUR", time.Second))
	require.Equal(t, time.Second, app.EnvDuration("FENCELAB_TEST_UNSET_DUR", time.Second))
}

// A settings reader sets what is present and well-formed, keeps the default
// otherwise, and reports the first malformed or out-of-bounds value by key.
func TestSettingsReaderKeepsDefaultsAndReportsTheFirstBadValue(t *testing.T) {
	cfg := app.Config{Settings: map[string]string{
		"X_DUR": "2s", "X_INT": "5", "X_BOOL": "true", "X_FAR": "10h", "X_WORD": "maybe",
	}}
	dur, n, b, unset := time.Second, 1, false, 3
	r := app.NewSettingsReader(cfg, "mod")
	r.Duration("X_DUR", &dur, time.Millisecond, time.Minute)
	r.Int("X_INT", &n, 1, 10)
	r.Bool("X_BOOL", &b)
	r.Int("X_UNSET", &unset, 1, 10)
	require.NoError(t, r.Err())
	require.Equal(t, 2*time.Second, dur)
	require.Equal(t, 5, n)
	require.True(t, b)
	require.Equal(t, 3, unset)

	far, word := time.Second, false
	r = app.NewSettingsReader(cfg, "mod")
	r.Duration("X_FAR", &far, time.Millisecond, time.Minute)
	r.Bool("X_WORD", &word)
	require.EqualError(t, r.Err(), `mod: X_FAR="10h": want a duration in 1ms..1m0s`)
	require.Equal(t, time.Second, far, "an out-of-bounds value leaves the default")
	require.False(t, word)
}
