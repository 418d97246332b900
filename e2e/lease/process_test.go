package lease_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

// The chapter's timeline with real OS processes: two `fencelab worker`
// processes run the daily-report job for one date. Worker A takes the
// lease and stalls at before_write (--pause-at); B is refused while A's
// lease is live; A's lease is expired with SQL; B takes over and writes;
// A is released, and its write is refused by the resource. Both exit
// cleanly on SIGTERM, and the report row holds B's content.
func TestReportJobAcrossTwoProcesses(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	e2etest.Binary(t) // build before the timeline starts
	name := report.LeaseName(day)
	reader := instance(t, a, "reader", nil)
	env := func(holder, level string) []string {
		return e2etest.ChildEnv(a.DBURL,
			"FENCELAB_REPORT_HOLDER="+holder,
			"FENCELAB_REPORT_DATE="+day.Format(report.DateLayout),
			"FENCELAB_REPORT_INTERVAL=50ms",
			"FENCELAB_REPORT_TTL=1h", // only the test's SQL ends A's lease
			"FENCELAB_LOG_LEVEL="+level)
	}

	workerA := startWorker(t, "worker-a", env("worker-a", "warn"), "--pause-at", faults.BeforeWrite)
	workerA.SkipTo(t, "PAUSED "+faults.BeforeWrite+" "+name)
	grants := grantsOf(t, a.Pool, name)
	require.Len(t, grants, 1)
	require.Equal(t, "worker-a", grants[0].Holder)
	fenceA := grants[0].Fence

	workerB := startWorker(t, "worker-b", env("worker-b", "debug"))
	workerB.WaitStderr(t, "report lease held by another instance")
	_, err := reader.Get(ctx, day)
	require.ErrorIs(t, err, report.ErrNoReport, "nobody has written while A holds the lease")

	forceExpiry(t, a.Pool, name, fenceA)
	var got report.Report
	require.Eventually(t, func() bool {
		got, err = reader.Get(ctx, day)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "B takes over and writes")
	require.Equal(t, "worker-b", got.WrittenBy)
	require.Greater(t, got.Fence, fenceA)
	fenceB := got.Fence

	workerA.Send(t) // release the pause
	workerA.WaitStderr(t, "report write refused: stale fence")
	require.Contains(t, workerA.Stderr(), "fence "+strconv.FormatInt(fenceA, 10)+" is older", "A's own fence was the one refused")

	for _, w := range []*e2etest.Child{workerA, workerB} {
		require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, w := range []*e2etest.Child{workerA, workerB} {
		require.NoError(t, w.Wait(t, 30*time.Second), "%s must exit cleanly on SIGTERM; stderr:\n%s", w.Name, w.Stderr())
	}

	final, err := reader.Get(ctx, day)
	require.NoError(t, err)
	require.Equal(t, got, final, "the report row still holds the live holder's content")
	require.Contains(t, final.Content, "worker-b")
	require.Equal(t, []write{{"worker-b", fenceB}}, writesOf(t, a.Pool, day))
	require.Equal(t, []grant{{"worker-a", fenceA}, {"worker-b", fenceB}}, grantsOf(t, a.Pool, name))
	e2etest.Assert(t, a.Pool, "lease", "report")
}

// startWorker runs `fencelab worker args…` as a child process.
func startWorker(t *testing.T, name string, env []string, args ...string) *e2etest.Child {
	t.Helper()
	return e2etest.StartChild(t, name, env, append([]string{"worker"}, args...)...)
}
