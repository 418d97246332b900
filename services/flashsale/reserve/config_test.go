package reserve

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
)

// The default limit follows a smaller pool; a limit set above the pool is
// refused at start (admitted operations past the pool would wait for a
// connection in a line nobody bounds: FS-R4).
func TestLimitFitsThePool(t *testing.T) {
	c, err := LoadConfig(app.Config{MaxConns: 4})
	require.NoError(t, err)
	require.Equal(t, 4, c.Limit, "the default on a pool of 4")
	c, err = LoadConfig(app.Config{MaxConns: 20})
	require.NoError(t, err)
	require.Equal(t, 8, c.Limit, "the default on a pool of 20")
	_, err = LoadConfig(app.Config{MaxConns: 4, Settings: map[string]string{EnvLimit: "6"}})
	require.ErrorContains(t, err, "exceeds the pool", "a limit of 6 set on a pool of 4")
}
