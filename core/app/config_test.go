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
