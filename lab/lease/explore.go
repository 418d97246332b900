package lease

// The lease chapter under every schedule (fencelab lab explore
// lease/paused-holder): two report instances and the clock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/report"
)

// pausedHolderExplore: instances A and B each run the day's report — step
// "acquire" takes (or fails to take) the lease, computes and renews it,
// up to the product's before_write point; step "write" writes through the
// output — and the clock, in one step, makes whatever lease is live reach
// its expiry (set with SQL: the exact boundary). Guarded, the fenced
// output refuses a write whose fence is no longer the lease's, so LOCK-I2
// holds in every schedule. Naive (last writer wins), the schedules where
// the clock expires A's lease, B takes it and writes, and only then A
// writes are the ones where the stale write lands; the others are not
// caught.
var pausedHolderExplore = &lab.Explore{
	Claim: "two report instances and the clock in every order: whichever holder is paused past its expiry, its write is refused once a newer fence exists, and the report keeps the highest fence that wrote it",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("acquire", "write")},
		{Name: "B", Steps: lab.Steps("acquire", "write")},
		{Name: "clock", Steps: lab.Steps("expire")},
	},
	Run: explorePausedHolder,
}

func explorePausedHolder(x *lab.X) {
	app := x.Start(lab.Options{})
	name := report.LeaseName(labDay)
	if x.Naive {
		x.Step(lab.Step{Actor: "db", Action: "report_output written without lease.Guard and without the row's fence condition", Outcome: lab.Violates,
			Note: "the naive resource"})
	}
	// The product's before_write point is the boundary between an
	// instance's two steps: every check it makes before writing has passed.
	x.StepAt(app.Faults, faults.BeforeWrite, "write")
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		d, db := labenv.ActorDeps(a, app)
		if a.Name == "clock" {
			a.Step("expire")
			var fence int64
			err := db.QueryRow(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1 AND expires_at > now() RETURNING fence`, name).Scan(&fence)
			switch {
			case err == nil:
				a.X.Step(lab.Step{Actor: a.Name, Action: "the live lease reaches its expiry", Outcome: lab.Accepted, Fence: fence})
			case errors.Is(err, context.Canceled):
				return
			default:
				a.Say("the live lease reaches its expiry", "no live lease", "")
			}
			return
		}
		holder := map[string]string{"A": "instance-a", "B": "instance-b"}[a.Name]
		var out report.Output // nil: the product's fenced output
		if x.Naive {
			out = unfencedOutput{db}
		}
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		svc, err := report.NewService(d, report.Config{Holder: holder, TTL: time.Hour, Interval: time.Minute, Output: out})
		require.NoError(x, err)

		a.Step("acquire")
		wrote, err := svc.Run(ctx, labDay) // pauses at before_write: the step "write"
		action := "run the report " + labDay.Format(report.DateLayout)
		switch {
		case err == nil:
			a.X.Step(lab.Step{Actor: a.Name, Action: "write report", Outcome: lab.Accepted, Fence: wrote.Fence})
		case errors.Is(err, lease.ErrHeld):
			a.Say(action, lab.Refused, "the lease is held by the other instance until its expiry")
		case errors.Is(err, report.ErrAlreadyWritten):
			a.Say(action, lab.Refused, "the report is already written")
		case errors.Is(err, lease.ErrStaleFence):
			a.Say("write report", lab.Refused, "stale fence: a newer holder exists")
		default:
			x.Error(a.Name, action, err)
		}
	})
	got, err := readReport(context.Background(), app.Pool, labDay)
	if errors.Is(err, report.ErrNoReport) {
		x.Step(lab.Step{Actor: "db", Action: "re-read report: none written"})
		return
	}
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read report: written by %s", got.WrittenBy), Fence: got.Fence})
	x.Figure("stored_fence", got.Fence)
}
