package points_test

import (
	"testing"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	pointslab "github.com/fencelab/fencelab/lab/points"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// start runs the app for a test that drives it with the chapter's kit.
func start(t *testing.T) *pointslab.Lab { return startWith(t, lab.Options{}) }

func startWith(t *testing.T, o lab.Options) *pointslab.Lab {
	t.Helper()
	return pointslab.StartLab(e2etest.X(t), o)
}
