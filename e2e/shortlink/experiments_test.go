package shortlink_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	shortlinklab "github.com/fencelab/fencelab/lab/shortlink"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestSL01HundredCreatorsOfOneAliasOneWinsEveryLoserGets409(t *testing.T) {
	e2etest.Experiment(t, shortlinklab.HundredCreatorsOneAlias)
}

func TestSL02RevokedLinkRedirectsAtMostOneTTLAfterTheRevoke(t *testing.T) {
	e2etest.Experiment(t, shortlinklab.RevokeWithinOneTTL)
}

func TestSL03RedirectsStay302WhileTheStatsStoreIsLockedOrDead(t *testing.T) {
	e2etest.Experiment(t, shortlinklab.RedirectsOutliveStats)
}

func TestSL04BatchRetriedAfterItsCommitStoresEachClickOnce(t *testing.T) {
	e2etest.Experiment(t, shortlinklab.ClickBatchRetried)
}
