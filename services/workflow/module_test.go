package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/fakeprovider"
)

// The tool URL is a module setting read through the settings reader: one
// app's Settings choose its tool (environment variables are process-wide),
// and a malformed URL stops the build instead of failing every call.
func TestToolURLIsReadFromTheAppsSettings(t *testing.T) {
	t.Parallel()
	with := func(url string) app.Config { return app.Config{Settings: map[string]string{EnvToolURL: url}} }

	tool, err := toolFrom(with("http://127.0.0.1:9/"))
	require.NoError(t, err)
	require.IsType(t, &fakeprovider.Client{}, tool)

	tool, err = toolFrom(app.Config{Settings: map[string]string{}})
	require.NoError(t, err)
	require.IsType(t, &loopbackTool{}, tool, "unset: the in-process loopback tool")

	_, err = toolFrom(with("127.0.0.1:9"))
	require.ErrorContains(t, err, EnvToolURL)
	_, err = toolFrom(with("ftp://tool"))
	require.ErrorContains(t, err, "want an http(s) URL")
}
