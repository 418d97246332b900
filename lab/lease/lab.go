package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/report"
)

// Experiments are the lease chapter's runnable claims (fencelab lab run …).
var Experiments = []lab.Experiment{PausedHolder, TwoProcesses, WatchdogKeepsAlive, WatchdogCancelsOnLoss}

// labDay is the day every lease experiment reports on: pinned, so no run
// depends on the calendar.
var labDay = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)

// PausedHolder is the chapter's timeline: instance A takes the day's lease,
// computes, passes its pre-write check and stalls (faults.BeforeWrite);
// B is refused while A's lease is live; A's lease expires (forced with SQL
// at the exact boundary); B takes the lease under a higher fence and
// writes; A resumes into its write — and the report refuses it
// (lease.ErrStaleFence), because the resource checks the fence itself.
//
// The naive version is the same timeline against a resource that does not
// check the fence: the lease behaves exactly as before (LOCK-I1 holds),
// and still A's stale write lands on top of B's. LOCK-I2 reports it.
var PausedHolder = lab.Experiment{
	ID:         "lease/paused-holder",
	Test:       "TestPausedHolderCannotWriteAfterExpiry",
	Claim:      "a holder paused past its lease's expiry cannot write the report once a newer holder has: the resource refuses the stale fence",
	Invariants: []string{"lease", "report"},
	Naive:      "the report is written without the fence check (last writer wins): the lease alone decides",
	Catches:    []string{"LOCK-I2"},
	Control:    "the same unfenced resource without the pause: A writes while its lease is live, then B finds the report written",
	Run:        runPausedHolder,
	Explore:    pausedHolderExplore,
}

func runPausedHolder(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{})
	name := report.LeaseName(labDay)
	var out report.Output // nil: the product's fenced output
	if x.Naive {
		out = unfencedOutput{a.Pool}
		x.Step(lab.Step{Actor: "db", Action: "report_output written without lease.Guard and without the row's fence condition", Outcome: lab.Violates,
			Note: "the naive resource"})
	}
	instA := labInstance(x, a, "instance-a", out)
	instB := labInstance(x, a, "instance-b", out)
	if x.Control {
		pausedHolderControl(x, a, instA, instB, name)
		return
	}
	leases := lease.New(a.Pool)

	stall := a.Faults.Pause(faults.BeforeWrite, name)
	x.Cleanup(stall.Release)
	doneA := make(chan error, 1)
	go func() {
		_, err := instA.Run(ctx, labDay)
		doneA <- err
	}()
	select {
	case <-stall.Reached():
	case err := <-doneA:
		x.Fatalf("A finished before reaching the fault point: %v", err)
	case <-time.After(30 * time.Second):
		x.Fatalf("A never reached the fault point")
	}
	st, err := leases.Get(ctx, name)
	require.NoError(x, err)
	require.Equal(x, "instance-a", st.Holder)
	require.True(x, st.Live)
	fenceA := st.Fence
	x.Step(lab.Step{Actor: "instance-a", Action: "acquire " + name, Outcome: lab.Accepted, Fence: fenceA})
	x.Step(lab.Step{Actor: "instance-a", Action: "compute the report; pre-write check: renew the lease", Outcome: lab.Accepted, Fence: fenceA})
	x.Step(lab.Step{Actor: "instance-a", Action: "stall before the write (GC pause, swapped out, …)", Outcome: "paused", Fence: fenceA,
		Note: "every check A will make has passed"})

	_, err = instB.Run(ctx, labDay)
	require.ErrorIs(x, err, lease.ErrHeld, "while A's lease is live, B cannot take it")
	x.Step(lab.Step{Actor: "instance-b", Action: "acquire " + name, Outcome: lab.Refused, Note: "held by instance-a until its expiry"})

	tag, err := a.Pool.Exec(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1 AND fence = $2`, name, fenceA)
	require.NoError(x, err)
	require.EqualValues(x, 1, tag.RowsAffected())
	x.Step(lab.Step{Actor: "db", Action: "A's lease reaches its expiry (set to now() with SQL: the exact boundary)", Fence: fenceA})

	wroteB, err := instB.Run(ctx, labDay)
	require.NoError(x, err, "B takes the expired lease and writes")
	require.Greater(x, wroteB.Fence, fenceA)
	x.Step(lab.Step{Actor: "instance-b", Action: "acquire " + name, Outcome: lab.Accepted, Fence: wroteB.Fence})
	x.Step(lab.Step{Actor: "instance-b", Action: "write report " + labDay.Format(report.DateLayout), Outcome: lab.Accepted, Fence: wroteB.Fence})

	stall.Release()
	var lateA error
	select {
	case lateA = <-doneA:
	case <-time.After(30 * time.Second):
		x.Fatalf("A did not finish after it was released")
	}
	step := lab.Step{Actor: "instance-a", Action: "resume: write report " + labDay.Format(report.DateLayout), Fence: fenceA}
	switch {
	case errors.Is(lateA, lease.ErrStaleFence):
		step.Outcome, step.Note = lab.Refused, fmt.Sprintf("stale fence: %d has written", wroteB.Fence)
	case lateA == nil:
		step.Outcome, step.Note = lab.Violates, "the stale write replaced B's report"
	default:
		step.Outcome, step.Note = "error", lateA.Error()
	}
	x.Step(step)

	got, err := readReport(ctx, a.Pool, labDay)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "re-read report " + labDay.Format(report.DateLayout) + ": written by " + got.WrittenBy, Fence: got.Fence})
	x.Figure("fence_a", fenceA)
	x.Figure("fence_b", wroteB.Fence)
	x.Figure("stored_fence", got.Fence)
	x.Figure("stale_write", step.Outcome)
	if x.Naive {
		return // LOCK-I2 judges it
	}
	require.ErrorIs(x, lateA, lease.ErrStaleFence, "A's late write is refused by the resource")
	require.Equal(x, wroteB.Content, got.Content, "B's report is intact")
	require.Equal(x, wroteB.Fence, got.Fence)
	require.Equal(x, "instance-b", got.WrittenBy)
	var writes []string
	rows, err := a.Pool.Query(ctx, `SELECT holder || '@' || fence FROM report_write WHERE report_date = $1 ORDER BY id`, labDay)
	require.NoError(x, err)
	for rows.Next() {
		var w string
		require.NoError(x, rows.Scan(&w))
		writes = append(writes, w)
	}
	require.NoError(x, rows.Err())
	require.Equal(x, []string{fmt.Sprintf("instance-b@%d", wroteB.Fence)}, writes, "A's refused write left no trace")
}

// pausedHolderControl is the naive resource without the pause: A writes
// while its lease is live, then B runs and finds the report written. One
// write, under the fence that was granted, and LOCK-I2 holds: what the
// naive resource cannot stop is the stale write the pause lets land, not
// a write alone.
func pausedHolderControl(x *lab.X, a *lab.App, instA, instB *report.Service, name string) {
	ctx := context.Background()
	wroteA, err := instA.Run(ctx, labDay)
	require.NoError(x, err, "A writes under its live lease")
	x.Step(lab.Step{Actor: "instance-a", Action: "acquire " + name + ", write report " + labDay.Format(report.DateLayout),
		Outcome: lab.Accepted, Fence: wroteA.Fence, Note: "no pause"})
	_, err = instB.Run(ctx, labDay)
	require.ErrorIs(x, err, report.ErrAlreadyWritten, "B comes after A's write")
	x.Step(lab.Step{Actor: "instance-b", Action: "run the report for " + labDay.Format(report.DateLayout), Outcome: lab.Refused, Note: err.Error()})
	got, err := readReport(ctx, a.Pool, labDay)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "re-read report " + labDay.Format(report.DateLayout) + ": written by " + got.WrittenBy, Fence: got.Fence})
	x.Figure("fence_a", wroteA.Fence)
	x.Figure("stored_fence", got.Fence)
}

// labInstance is one report-job instance, as a separate deployment would
// run it: its own holder identity on the app's pool and fault points.
// out == nil is the product's fenced output.
func labInstance(x *lab.X, a *lab.App, holder string, out report.Output) *report.Service {
	x.Helper()
	d := labenv.Deps(a)
	d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := report.NewService(d, report.Config{Holder: holder, TTL: time.Hour, Interval: time.Minute, Output: out})
	require.NoError(x, err)
	return svc
}

// unfencedOutput is the naive resource of the lease chapter: the same
// upsert and write log as FencedOutput, minus lease.Guard and minus the
// row's own fence condition, so the last writer wins. The product never
// uses it; the naive experiments do, to show what the lease alone cannot
// prevent (LOCK-I2 catches it).
type unfencedOutput struct{ db pg.Querier }

// UnfencedOutput returns the naive resource for experiments elsewhere (the
// linearizability check's broken guard).
func UnfencedOutput(db pg.Querier) report.Output { return unfencedOutput{db} }

func (o unfencedOutput) Write(ctx context.Context, l lease.Lease, r report.Report) (report.Report, error) {
	err := o.db.QueryRow(ctx, `
		WITH written AS (
		    INSERT INTO report_output (report_date, content, written_fence, written_by, written_at)
		    VALUES ($1, $2, $3, $4, now())
		    ON CONFLICT (report_date) DO UPDATE SET
		        content = excluded.content, written_fence = excluded.written_fence,
		        written_by = excluded.written_by, written_at = excluded.written_at
		    RETURNING report_date, written_fence, written_by, written_at
		), logged AS (
		    INSERT INTO report_write (report_date, fence, holder, written_at)
		    SELECT report_date, written_fence, written_by, written_at FROM written
		)
		SELECT written_at FROM written`, r.Date, r.Content, l.Fence, l.Holder).Scan(&r.WrittenAt)
	if err != nil {
		return report.Report{}, err
	}
	r.Fence, r.WrittenBy = l.Fence, l.Holder
	return r, nil
}

// TwoProcesses is the chapter's timeline with real OS processes: two
// `fencelab worker` processes run the daily-report job for one date.
// Worker A takes the lease and stalls at before_write (--pause-at); B is
// refused while A's lease is live; A's lease is expired with SQL; B takes
// over and writes; A is released, and its write is refused by the
// resource. Both exit cleanly on SIGTERM, and the report holds B's content.
var TwoProcesses = lab.Experiment{
	ID:         "lease/two-processes",
	Test:       "TestReportJobAcrossTwoProcesses",
	Claim:      "two worker processes share the daily report: the one paused past its lease is refused at the report, and both stop cleanly",
	Invariants: []string{"lease", "report"},
	Run:        runTwoProcesses,
}

func runTwoProcesses(x *lab.X) {
	ctx := context.Background()
	db := x.Database()
	pool := labkit.Pool(x, db)
	name := report.LeaseName(labDay)
	env := func(holder, level string) []string {
		return x.Env.ChildEnv(db,
			"FENCELAB_REPORT_HOLDER="+holder,
			"FENCELAB_REPORT_DATE="+labDay.Format(report.DateLayout),
			"FENCELAB_REPORT_INTERVAL=50ms",
			"FENCELAB_REPORT_TTL=1h", // only the experiment's SQL ends A's lease
			"FENCELAB_LOG_LEVEL="+level)
	}
	grants := func() []string {
		rows, err := pool.Query(ctx, `SELECT holder || '@' || fence FROM lease_grant WHERE name = $1 ORDER BY id`, name)
		require.NoError(x, err)
		var out []string
		for rows.Next() {
			var g string
			require.NoError(x, rows.Scan(&g))
			out = append(out, g)
		}
		require.NoError(x, rows.Err())
		return out
	}

	workerA := x.Spawn("worker-a", env("worker-a", "warn"), "worker", "--pause-at", faults.BeforeWrite)
	workerA.Expect(x, "PAUSED "+faults.BeforeWrite+" "+name)
	var fenceA int64
	require.NoError(x, pool.QueryRow(ctx, `SELECT fence FROM lease_grant WHERE name = $1 AND holder = 'worker-a'`, name).Scan(&fenceA))
	require.Len(x, grants(), 1)
	x.Step(lab.Step{Actor: "process-A", Action: fmt.Sprintf("pid %d: acquire %s, compute, pre-write check", workerA.Pid(), name), Outcome: lab.Accepted, Fence: fenceA})
	x.Step(lab.Step{Actor: "process-A", Action: "stop before the write (--pause-at " + faults.BeforeWrite + ")", Outcome: "paused", Fence: fenceA})

	workerB := x.Spawn("worker-b", env("worker-b", "debug"), "worker")
	workerB.WaitStderr(x, "report lease held by another instance")
	_, err := readReport(ctx, pool, labDay)
	require.ErrorIs(x, err, report.ErrNoReport, "nobody has written while A holds the lease")
	x.Step(lab.Step{Actor: "process-B", Action: fmt.Sprintf("pid %d: acquire %s", workerB.Pid(), name), Outcome: lab.Refused, Note: "held by worker-a"})

	tag, err := pool.Exec(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1 AND fence = $2`, name, fenceA)
	require.NoError(x, err)
	require.EqualValues(x, 1, tag.RowsAffected())
	x.Step(lab.Step{Actor: "db", Action: "A's lease reaches its expiry (set to now() with SQL)", Fence: fenceA})

	var got report.Report
	deadline := time.Now().Add(lab.ProcWait)
	for got, err = readReport(ctx, pool, labDay); err != nil; got, err = readReport(ctx, pool, labDay) {
		require.ErrorIs(x, err, report.ErrNoReport)
		require.True(x, time.Now().Before(deadline), "B never took over")
		time.Sleep(20 * time.Millisecond) // B's own 50 ms interval sets the pace
	}
	require.Equal(x, "worker-b", got.WrittenBy)
	require.Greater(x, got.Fence, fenceA)
	x.Step(lab.Step{Actor: "process-B", Action: "acquire, write report " + labDay.Format(report.DateLayout), Outcome: lab.Accepted, Fence: got.Fence})

	workerA.Release(x)
	workerA.WaitStderr(x, "report write refused: stale fence")
	require.Contains(x, workerA.Stderr(), fmt.Sprintf("fence %d is older", fenceA), "A's own fence was the one refused")
	x.Step(lab.Step{Actor: "process-A", Action: "resume: write report " + labDay.Format(report.DateLayout), Outcome: lab.Refused, Fence: fenceA,
		Note: fmt.Sprintf("stale fence: %d has written", got.Fence)})

	for _, w := range []*lab.Proc{workerA, workerB} {
		w.Terminate(x)
	}
	for _, w := range []*lab.Proc{workerA, workerB} {
		require.NoError(x, w.Wait(x), "%s must exit cleanly on SIGTERM; stderr:\n%s", w.Name, w.Stderr())
	}
	x.Step(lab.Step{Actor: "admin", Action: "SIGTERM both processes", Outcome: "exited 0"})

	final, err := readReport(ctx, pool, labDay)
	require.NoError(x, err)
	require.Equal(x, got, final, "the report row still holds the live holder's content")
	require.Equal(x, []string{fmt.Sprintf("worker-a@%d", fenceA), fmt.Sprintf("worker-b@%d", got.Fence)}, grants())
	var writes int
	require.NoError(x, pool.QueryRow(ctx, `SELECT count(*) FROM report_write WHERE report_date = $1`, labDay).Scan(&writes))
	require.Equal(x, 1, writes, "A's refused write left no trace")
	x.Step(lab.Step{Actor: "db", Action: "re-read: report by " + final.WrittenBy + ", 2 grants, 1 write", Fence: final.Fence})
	x.Figure("os_processes", 2)
	x.Figure("grants", 2)
	x.Figure("writes", writes)
	x.Figure("stale_writes_refused", 1)
}

// WatchdogKeepsAlive: a task that runs for twice its lease's TTL, by the
// database clock, keeps the lease throughout: the watchdog renews it every
// TTL/3, a competitor is refused every time it asks, and the fence never
// changes. The wait here is the claim itself (the task is long), not a
// stand-in for a boundary; the margin is two renewal intervals.
var WatchdogKeepsAlive = lab.Experiment{
	ID:         "lease/watchdog-keeps-alive",
	Test:       "TestWatchdogKeepsALongTaskAlive",
	Claim:      "a task twice as long as its lease keeps it: the watchdog renews at TTL/3 under one fence, and a competitor is refused throughout",
	Invariants: []string{"lease"},
	Run:        runWatchdogKeepsAlive,
}

func runWatchdogKeepsAlive(x *lab.X) {
	ctx := context.Background()
	pool := labkit.Pool(x, x.Database())
	leases := lease.New(pool)
	// 3 s, not less: a renewal every second must land within a TTL even on
	// a loaded 2-core machine (at 1.2 s one missed it at load 20 and the
	// watchdog rightly cancelled the task).
	const ttl = 3 * time.Second
	// The watchdog's own Manager records each renewal's database time.
	renewals := &renewLog{Querier: pool, ttl: ttl}
	watched := lease.New(renewals)

	l, err := leases.Acquire(ctx, "long-task", "worker-a", ttl)
	require.NoError(x, err)
	taskCtx, w, err := watched.Watch(ctx, l, 0)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "worker-a", Action: fmt.Sprintf("acquire long-task (TTL %v), start the watchdog (renews every TTL/3)", ttl), Outcome: lab.Accepted, Fence: l.Fence,
		DBTime: l.ExpiresAt.Add(-ttl)})
	// The long task: work in small steps until the database clock is a
	// full TTL past the lease's original expiry.
	refused := 0
	for {
		require.NoError(x, taskCtx.Err(), "the task's context must stay open while the lease is renewed")
		var done bool
		require.NoError(x, pool.QueryRow(ctx, `SELECT now() > $1::timestamptz + $2 * interval '1 microsecond'`,
			l.ExpiresAt, ttl.Microseconds()).Scan(&done))
		if done {
			break
		}
		_, err := leases.Acquire(ctx, "long-task", "worker-b", ttl)
		require.ErrorIs(x, err, lease.ErrHeld, "a competitor must never get a lease the watchdog keeps")
		if refused%10 == 0 {
			x.Step(lab.Step{Actor: "worker-b", Action: "acquire long-task", Outcome: lab.Refused, Note: fmt.Sprintf("%d renewals so far", w.Renewals())})
		}
		refused++
		time.Sleep(50 * time.Millisecond) // the task's own pace
	}
	require.NoError(x, taskCtx.Err())
	last, err := w.Stop()
	require.NoError(x, err, "nothing was lost")
	require.ErrorIs(x, context.Cause(taskCtx), context.Canceled, "Stop ends the task's context, without a loss")
	x.Step(lab.Step{Actor: "worker-a", Action: "task done, two TTLs after it began; stop the watchdog", Outcome: lab.Accepted, Fence: last.Fence,
		Note: fmt.Sprintf("%d renewals; worker-b refused %d times", w.Renewals(), refused)})
	// The period, measured at the lease row: the grant, then each
	// renewal, by the database's clock. A watchdog renewing at TTL/2
	// would put the median at 1.5 s, above TTL/2.5; every gap must stay
	// under the TTL (a longer one would have let the lease lapse).
	times := append([]time.Time{l.ExpiresAt.Add(-ttl)}, renewals.times()...)
	// A renewal that committed while Stop was called is recorded here but
	// not counted by the watchdog (it returns without counting it).
	require.Contains(x, []int{w.Renewals(), w.Renewals() + 1}, len(times)-1, "every renewal is recorded with its database time")
	require.GreaterOrEqual(x, w.Renewals(), 4, "renewed over two TTLs")
	period := gaps(times)
	mid := median(period)
	for i, g := range period {
		require.Less(x, g, ttl, "gap %d between renewals (%v) must stay under the TTL", i+1, g)
	}
	require.GreaterOrEqual(x, mid, ttl/4, "the median renewal period (%v) is about TTL/3", mid)
	require.LessOrEqual(x, mid, ttl*2/5, "the median renewal period (%v) is about TTL/3, well under TTL/2", mid)
	ms := make([]int64, len(period))
	for i, g := range period {
		ms[i] = g.Milliseconds()
	}
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("renewal period by the database clock: median %v (TTL/3 = %v)", mid.Round(time.Millisecond), ttl/3),
		Outcome: "measured", Note: fmt.Sprintf("gaps (ms): %v", ms), DBTime: times[0], DBEnd: times[len(times)-1]})
	x.Figure("renewal_period_median_ms", mid.Milliseconds())
	require.Equal(x, l.Fence, last.Fence, "renewal keeps the fence")
	require.True(x, last.ExpiresAt.After(l.ExpiresAt.Add(ttl)), "the lease now expires later than the task's original deadline")
	require.Positive(x, refused)

	st, err := leases.Get(ctx, "long-task")
	require.NoError(x, err)
	require.Equal(x, "worker-a", st.Holder)
	require.Equal(x, l.Fence, st.Fence)
	var grants int
	require.NoError(x, pool.QueryRow(ctx, `SELECT count(*) FROM lease_grant WHERE name = 'long-task'`).Scan(&grants))
	require.Equal(x, 1, grants, "one grant, renewed; never re-acquired")
	x.Step(lab.Step{Actor: "db", Action: "re-read: long-task held by worker-a, one grant", Fence: st.Fence})
	x.Figure("renewals", w.Renewals())
	x.Figure("competitor_refused", refused)
	x.Figure("grants", grants)
}

// WatchdogCancelsOnLoss: when the lease is lost — taken by another holder
// after an expiry, merely expired, or re-taken by its own holder — the
// next renewal fails and the task's context is cancelled with ErrLost. The
// lease's TTL is an hour and the watchdog's interval 100 ms, so "at the
// next renewal" is measured: from the loss (the database time of the
// statement that took the lease away) to the cancellation (the database
// clock read as soon as the task's context is done), at most one interval
// plus the slack of one round trip on a loaded machine, and no renewal
// succeeds in between.
//
// The naive version is the watchdog that notices the failed renewal and
// does not cancel the task: the task keeps writing the report (through a
// resource that trusts the watchdog and checks no fence) after another
// instance took the lease over and wrote, and LOCK-I2 catches the stale
// write.
var WatchdogCancelsOnLoss = lab.Experiment{
	ID:         "lease/watchdog-cancels-on-loss",
	Test:       "TestWatchdogCancelsOnLoss",
	Claim:      "a watched task whose lease is lost (taken over, expired, re-taken) is cancelled with ErrLost at the next renewal",
	Invariants: []string{"lease", "report"},
	Naive:      "a watchdog that notes the failed renewal and does not cancel the task: the task keeps writing the report (without a fence check) after instance-b took the lease over and wrote",
	Catches:    []string{"LOCK-I2"},
	Control:    "the same naive watchdog and unfenced writes, and the lease is not lost: instance-b is refused, and instance-a's report lands under its live fence",
	Run:        runWatchdogCancelsOnLoss,
}

// cancelSlack is the part of the cancel latency that is not the watchdog's
// interval: the failing renewal's round trip and the read of the database
// clock after the cancellation, on a shared machine under load.
const cancelSlack = 400 * time.Millisecond

func runWatchdogCancelsOnLoss(x *lab.X) {
	if x.Naive {
		watchedWriter(x)
		return
	}
	ctx := context.Background()
	pool := labkit.Pool(x, x.Database())
	leases := lease.New(pool)
	const every = 100 * time.Millisecond
	expire := func(l lease.Lease) time.Time {
		var at time.Time
		require.NoError(x, pool.QueryRow(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1 AND fence = $2 RETURNING now()`,
			l.Name, l.Fence).Scan(&at))
		return at
	}
	cases := []struct {
		name    string
		lose    func(l lease.Lease) (string, time.Time) // what happened, and its database time
		holder  string                                  // the lease row's holder afterwards
		regrant bool                                    // whether a new grant moved the fence
	}{
		{"taken over", func(l lease.Lease) (string, time.Time) {
			at := expire(l)
			_, err := leases.Acquire(ctx, l.Name, "worker-b", time.Hour)
			require.NoError(x, err)
			return "expire (SQL); worker-b acquires", at
		}, "worker-b", true},
		{"expired", func(l lease.Lease) (string, time.Time) {
			return "expire (SQL)", expire(l)
		}, "worker-a", false},
		{"re-taken by its own holder", func(l lease.Lease) (string, time.Time) {
			l2, err := leases.Acquire(ctx, l.Name, l.Holder, time.Hour)
			require.NoError(x, err)
			return "worker-a acquires again (a new grant)", l2.ExpiresAt.Add(-time.Hour)
		}, "worker-a", true},
	}
	var worst time.Duration
	for _, c := range cases {
		name := "watched:" + c.name
		l, err := leases.Acquire(ctx, name, "worker-a", time.Hour)
		require.NoError(x, err)
		taskCtx, w, err := leases.Watch(ctx, l, every)
		require.NoError(x, err)
		lab.WaitFor(x, 10*time.Second, "the first renewal", func() bool { return w.Renewals() >= 1 })
		require.NoError(x, taskCtx.Err())
		x.Step(lab.Step{Actor: "worker-a", Action: fmt.Sprintf("acquire %s, watchdog renewing every %v", name, every), Outcome: lab.Accepted, Fence: l.Fence})

		how, lostAt := c.lose(l)
		before := w.Renewals()
		x.Step(lab.Step{Actor: "db", Action: c.name + ": " + how, DBTime: lostAt})
		select {
		case <-taskCtx.Done():
		case <-time.After(lab.DefaultWait):
			x.Fatalf("the task's context was not cancelled after the lease was lost (%s)", c.name)
		}
		cancelledAt := x.DBNow(pool)
		require.ErrorIs(x, context.Cause(taskCtx), lease.ErrLost)
		_, err = w.Stop()
		require.ErrorIs(x, err, lease.ErrLost)
		// At the next renewal: at most the one renewal already in flight
		// when the loss committed succeeded (it ran before the loss), and
		// the cancellation followed within one interval plus the slack.
		require.LessOrEqual(x, w.Renewals(), before+1, "%s: a renewal succeeded after the loss", c.name)
		latency := cancelledAt.Sub(lostAt)
		require.Positive(x, latency, "%s: cancelled before the loss?", c.name)
		require.LessOrEqual(x, latency, every+cancelSlack, "%s: cancelled %v after the loss, more than one renewal interval (%v) + %v", c.name, latency, every, cancelSlack)
		worst = max(worst, latency)
		x.Step(lab.Step{Actor: "worker-a", Action: "next renewal fails; the task's context is cancelled", Outcome: "cancelled", Fence: l.Fence,
			Note:   fmt.Sprintf("%v after the loss (bound: interval %v + %v); %s", latency.Round(time.Millisecond), every, cancelSlack, context.Cause(taskCtx)),
			DBTime: cancelledAt})

		st, err := leases.Get(ctx, name)
		require.NoError(x, err)
		require.Equal(x, c.holder, st.Holder)
		if c.regrant {
			require.Greater(x, st.Fence, l.Fence)
		} else {
			require.Equal(x, l.Fence, st.Fence)
			require.False(x, st.Live, "an expired lease is not renewed back to life")
		}
	}
	x.Figure("losses", len(cases))
	x.Figure("cancelled", len(cases))
	x.Figure("worst_cancel_latency_ms", worst.Milliseconds())
}

// readReport reads day's report row as an operator would, with SQL: the
// experiment checks what the database holds, not what the service says.
func readReport(ctx context.Context, db pg.Querier, day time.Time) (report.Report, error) {
	var r report.Report
	err := db.QueryRow(ctx, `
SELECT report_date, content, written_fence, written_by, written_at
  FROM report_output
 WHERE report_date = $1`, day).Scan(&r.Date, &r.Content, &r.Fence, &r.WrittenBy, &r.WrittenAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return report.Report{}, fmt.Errorf("%w: %s", report.ErrNoReport, day.Format(report.DateLayout))
	}
	return r, err
}
