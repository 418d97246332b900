package app_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
)

// BuildService hands each step what the one before made, and the first
// error stops the build before the later steps run.
func TestBuildServiceRunsItsStepsInOrderAndStopsAtTheFirstError(t *testing.T) {
	var ran []string
	load := func(c app.Config) (string, error) { ran = append(ran, "load"); return "cfg:" + c.LogLevel, nil }
	newSvc := func(_ app.Deps, cfg string) (string, error) {
		ran = append(ran, "service")
		return "svc(" + cfg + ")", nil
	}
	var got string
	runtime := func(_ app.Deps, cfg, svc string) (app.Runtime, error) {
		ran = append(ran, "runtime")
		got = cfg + " " + svc
		return app.Runtime{}, nil
	}
	_, err := app.BuildService(load, newSvc, runtime)(app.Deps{Config: app.Config{LogLevel: "debug"}})
	require.NoError(t, err)
	require.Equal(t, []string{"load", "service", "runtime"}, ran)
	require.Equal(t, "cfg:debug svc(cfg:debug)", got)

	ran = nil
	bad := errors.New("bad setting")
	failLoad := func(app.Config) (string, error) { ran = append(ran, "load"); return "", bad }
	_, err = app.BuildService(failLoad, newSvc, runtime)(app.Deps{})
	require.ErrorIs(t, err, bad)
	require.Equal(t, []string{"load"}, ran, "no service is made from settings that failed")
}
