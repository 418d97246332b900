package lease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/report"
)

// renewLog is the database a watchdog's Manager runs on, recording the
// database time of every successful renewal: the renewal statement sets
// expires_at = now() + TTL and returns it, so expires_at − TTL is the
// renewal's own transaction time by the database clock. The watchdog's
// period is then measured where it matters (at the lease row), not from
// the watchdog's own ticker.
type renewLog struct {
	pg.Querier
	ttl time.Duration
	mu  sync.Mutex
	at  []time.Time
}

func (r *renewLog) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	row := r.Querier.QueryRow(ctx, sql, args...)
	if strings.Contains(sql, "UPDATE lease") && strings.Contains(sql, "expires_at = now() +") {
		return renewRow{row, r}
	}
	return row
}

// times returns the renewals' database times so far.
func (r *renewLog) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at)
}

type renewRow struct {
	pgx.Row
	log *renewLog
}

func (r renewRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if err == nil && len(dest) == 1 {
		if t, ok := dest[0].(*time.Time); ok {
			r.log.mu.Lock()
			r.log.at = append(r.log.at, t.Add(-r.log.ttl))
			r.log.mu.Unlock()
		}
	}
	return err
}

// gaps returns the intervals between consecutive times.
func gaps(ts []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]))
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// naiveWatchdog is the watchdog the chapter warns against: it renews the
// lease on a timer and, when a renewal fails, notes it and carries on —
// it never cancels the task. The task, told nothing, keeps writing under a
// fence that is no longer the lease's.
type naiveWatchdog struct {
	lost chan error // the first failed renewal, for the timeline
	stop chan struct{}
	done chan struct{}
}

func naiveWatch(m *lease.Manager, l lease.Lease, every time.Duration) *naiveWatchdog {
	w := &naiveWatchdog{lost: make(chan error, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			renewed, err := m.Renew(context.Background(), l)
			if err != nil {
				select {
				case w.lost <- err: // noticed, and ignored: no cancel
				default:
				}
				continue
			}
			l = renewed
		}
	}()
	return w
}

func (w *naiveWatchdog) Stop() { close(w.stop); <-w.done }

// watchedWriter runs the naive version of lease/watchdog-cancels-on-loss
// and its control. instance-a holds the report's lease under a watchdog
// that renews every 20 ms, computes, and writes the report through a
// resource without a fence check (the task trusts its watchdog to stop
// it). In the naive run its lease is taken over while it computes —
// expired with SQL, then instance-b runs the product's report job and
// writes under the next fence — and the naive watchdog's next renewal
// fails without cancelling anything, so instance-a's write lands on top of
// instance-b's report: LOCK-I2 sees a write under a lower fence after a
// higher one. In the control the lease is never lost: instance-b is
// refused, instance-a's write lands under its live fence, LOCK-I2 holds.
func watchedWriter(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{})
	leases := lease.New(a.Pool)
	name := report.LeaseName(labDay)
	out := unfencedOutput{a.Pool}
	x.Step(lab.Step{Actor: "db", Action: "report_output written without lease.Guard and without the row's fence condition",
		Note: "the task relies on its watchdog alone"})
	l, err := leases.Acquire(ctx, name, "instance-a", time.Hour)
	require.NoError(x, err)
	w := naiveWatch(leases, l, 20*time.Millisecond)
	x.Cleanup(w.Stop)
	x.Step(lab.Step{Actor: "instance-a", Action: "acquire " + name + "; naive watchdog renewing every 20ms (it never cancels the task)",
		Outcome: lab.Accepted, Fence: l.Fence, DBTime: l.ExpiresAt.Add(-time.Hour)})
	x.Step(lab.Step{Actor: "instance-a", Action: "compute the report (a long task, under the watchdog)", Fence: l.Fence})

	instB := labInstance(x, a, "instance-b", nil) // the product's report job, fenced
	if x.Control {
		_, err := instB.Run(ctx, labDay)
		require.ErrorIs(x, err, lease.ErrHeld, "the lease is live: instance-b is refused")
		x.Step(lab.Step{Actor: "instance-b", Action: "acquire " + name, Outcome: lab.Refused, Note: "held by instance-a: the lease is not lost"})
	} else {
		tag, err := a.Pool.Exec(ctx, `UPDATE lease SET expires_at = now() WHERE name = $1 AND fence = $2`, name, l.Fence)
		require.NoError(x, err)
		require.EqualValues(x, 1, tag.RowsAffected())
		x.Step(lab.Step{Actor: "db", Action: "instance-a's lease reaches its expiry (set to now() with SQL)", Fence: l.Fence})
		wroteB, err := instB.Run(ctx, labDay)
		require.NoError(x, err, "instance-b takes the expired lease and writes")
		x.Step(lab.Step{Actor: "instance-b", Action: "acquire " + name + ", write report " + labDay.Format(report.DateLayout),
			Outcome: lab.Accepted, Fence: wroteB.Fence, DBTime: wroteB.WrittenAt})
		lossErr := lab.WaitOrTimeout(x, w.lost, "the naive watchdog's renewal never failed")
		require.True(x, errors.Is(lossErr, lease.ErrLost), "the renewal failed because the lease was lost: %v", lossErr)
		x.Step(lab.Step{Actor: "instance-a", Action: "watchdog: renewal fails", Outcome: "ignored", Fence: l.Fence,
			Note: lossErr.Error() + " — the task's context stays open"})
	}
	last, err := out.Write(ctx, l, report.Report{Date: labDay, Content: "report by instance-a"})
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "instance-a", Action: "task done: write report " + labDay.Format(report.DateLayout), Outcome: lab.Accepted, Fence: l.Fence, DBTime: last.WrittenAt})
	got, err := readReport(ctx, a.Pool, labDay)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "re-read report " + labDay.Format(report.DateLayout) + ": written by " + got.WrittenBy, Fence: got.Fence})
	require.Equal(x, last.Content, got.Content, "instance-a's report is what the row holds")
	x.Figure("fence_a", l.Fence)
	x.Figure("stored_fence", got.Fence)
}
