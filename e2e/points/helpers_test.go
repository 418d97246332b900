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

// startWithAccount is most tests' opening: the test runs parallel to the
// package's others (each start has its own database), with one account
// of the given balance and its owner's token.
func startWithAccount(t *testing.T, account, owner string, balance int64) (*pointslab.Lab, string) {
	t.Helper()
	t.Parallel()
	l := start(t)
	l.OpenAccount(t, account, owner, balance)
	return l, l.User(t, owner)
}

func startWith(t *testing.T, o lab.Options) *pointslab.Lab {
	t.Helper()
	return pointslab.StartLab(e2etest.X(t), o)
}
