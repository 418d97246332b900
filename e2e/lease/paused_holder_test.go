package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

// outcome is what the chapter's timeline leaves behind.
type outcome struct {
	fenceA, fenceB int64
	wroteB         report.Report
	lateA          error // A's write after it resumed
}

// pausedHolderTimeline runs the chapter's timeline against out:
//
//	A acquires (fence f), computes, passes its pre-write check, stalls at
//	faults.BeforeWrite; B is refused while A's lease is live; A's lease
//	expires (forced with SQL at the exact boundary); B acquires (fence >
//	f) and writes; A resumes and writes its stale result.
func pausedHolderTimeline(t *testing.T, a *e2etest.App, out report.Output) outcome {
	t.Helper()
	name := report.LeaseName(day)
	instA := instance(t, a, "instance-a", out)
	instB := instance(t, a, "instance-b", out)
	leases := lease.New(a.Pool)

	stall := a.Faults.Pause(faults.BeforeWrite, name)
	doneA := make(chan error, 1)
	go func() {
		_, err := instA.Run(ctx, day)
		doneA <- err
	}()
	select {
	case <-stall.Reached():
	case err := <-doneA:
		t.Fatalf("A finished before reaching the fault point: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("A never reached the fault point")
	}

	// A holds a live lease and has passed every check it will make.
	st, err := leases.Get(ctx, name)
	require.NoError(t, err)
	require.Equal(t, "instance-a", st.Holder)
	require.True(t, st.Live)
	fenceA := st.Fence

	_, err = instB.Run(ctx, day)
	require.ErrorIs(t, err, lease.ErrHeld, "while A's lease is live, B cannot take it")

	forceExpiry(t, a.Pool, name, fenceA)
	wroteB, err := instB.Run(ctx, day)
	require.NoError(t, err, "B takes the expired lease and writes")
	require.Greater(t, wroteB.Fence, fenceA)

	stall.Release()
	lateA := e2etest.WaitOrTimeout(t, doneA, "A did not finish after it was released")
	return outcome{fenceA: fenceA, fenceB: wroteB.Fence, wroteB: wroteB, lateA: lateA}
}

// The chapter's one acceptance condition: a paused old holder, once
// resumed, cannot write the protected resource.
func TestPausedHolderCannotWriteAfterExpiry(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	o := pausedHolderTimeline(t, a, nil)

	require.ErrorIs(t, o.lateA, lease.ErrStaleFence, "A's late write is refused by the resource")

	svc := instance(t, a, "reader", nil)
	got, err := svc.Get(ctx, day)
	require.NoError(t, err)
	require.Equal(t, o.wroteB.Content, got.Content, "B's report is intact")
	require.Contains(t, got.Content, "instance-b")
	require.Equal(t, o.fenceB, got.Fence)
	require.Equal(t, "instance-b", got.WrittenBy)
	require.Equal(t, []write{{"instance-b", o.fenceB}}, writesOf(t, a.Pool, day), "A's refused write left no trace")
	require.Equal(t, []grant{{"instance-a", o.fenceA}, {"instance-b", o.fenceB}}, grantsOf(t, a.Pool, report.LeaseName(day)))

	// The API shows the same thing to a reader.
	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/reports/2026-05-01", Token: a.Token(t, "user-0042", httpx.RoleUser)})
	require.Equal(t, 200, r.Status, string(r.Body))
	var v report.View
	r.JSON(t, &v)
	require.Equal(t, report.View{Date: "2026-05-01", Content: o.wroteB.Content, Fence: o.fenceB, WrittenBy: "instance-b", WrittenAt: v.WrittenAt}, v)

	e2etest.Assert(t, a.Pool, "lease", "report")
}

// The same timeline against a resource that does not check the token: the
// lease behaves exactly as before (LOCK-I1 holds, B was refused while A's
// lease was live, A's pre-write check passed), and still A's stale write
// lands on top of B's. The guarantee lives at the resource or nowhere.
func TestUnfencedResourceLosesTheGuarantee(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	o := pausedHolderTimeline(t, a, unfencedOutput{a.Pool})

	require.NoError(t, o.lateA, "without the check, A's stale write is accepted")

	svc := instance(t, a, "reader", nil)
	got, err := svc.Get(ctx, day)
	require.NoError(t, err)
	require.Contains(t, got.Content, "instance-a", "A's stale report replaced B's")
	require.Equal(t, o.fenceA, got.Fence)
	require.Less(t, got.Fence, o.fenceB, "the stored report carries an older fence than one that already wrote")
	require.Equal(t, []write{{"instance-b", o.fenceB}, {"instance-a", o.fenceA}}, writesOf(t, a.Pool, day))

	// The lease did its part perfectly…
	e2etest.Assert(t, a.Pool, "lease")
	// …and LOCK-I2 catches what the resource let through.
	res := e2etest.Invariants().Run(ctx, a.Pool, "LOCK-I2")
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.False(t, res[0].Holds(), "LOCK-I2 must report the stale write")
	var problems []string
	for _, row := range res[0].Rows {
		problems = append(problems, row[len(row)-1].(string))
	}
	require.Contains(t, problems, "written after a higher fence had written")
}
