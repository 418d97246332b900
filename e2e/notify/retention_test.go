package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
	"github.com/fencelab/fencelab/services/notify"
)

// notify.purge (FENCELAB_NOTIFY_RETENTION): a notification whose tasks have
// all finished goes, past the retention, with its tasks, attempts and
// claim jobs and their history; one with a task still live stays whatever
// its age. The retention is NTF-I1's dedupe window: the purged event
// submitted again is a new notification, the kept one is still deduplicated.
// Outside the purge the attempts stay append-only (NTF-I3).
func TestRetentionPurgesWholeFinishedNotificationsOnly(t *testing.T) {
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{})
	ctx := context.Background()
	l.Prefs(t, "user-0042", map[string]bool{notify.ChannelEmail: true})
	done := l.Submit(t, notifylab.LabEvent("user-0042", "order:ord-5001:shipped"))
	jobs := l.ClaimAs(t, notify.ChannelEmail, "worker-1")
	require.Len(t, jobs, 1)
	require.NoError(t, l.Jobs.Execute(ctx, jobs[0]))
	delivered := notifylab.LabTask(t, l.Get(t, done.ID), notify.ChannelEmail)
	require.Equal(t, notify.TaskDelivered, delivered.State)
	live := l.Submit(t, notifylab.LabEvent("user-0042", "order:ord-5002:shipped"))
	require.Equal(t, notify.TaskQueued, notifylab.LabTask(t, l.Get(t, live.ID), notify.ChannelEmail).State)

	// Inside the retention nothing goes.
	n, err := notify.Purge(ctx, l.Pool, notify.DefaultRetention)
	require.NoError(t, err)
	require.Zero(t, n)

	// Past it (an exact boundary set with SQL, not a sleep).
	past := (notify.DefaultRetention + time.Hour).Microseconds()
	_, err = l.Pool.Exec(ctx, `UPDATE notify_notification SET created_at = now() - $1::bigint * interval '1 microsecond'`, past)
	require.NoError(t, err)
	_, err = l.Pool.Exec(ctx, `UPDATE job_history SET updated_at = now() - $1::bigint * interval '1 microsecond' WHERE kind LIKE 'notify.%'`, past) // finished jobs are in job_history
	require.NoError(t, err)
	n, err = notify.Purge(ctx, l.Pool, notify.DefaultRetention)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only the notification whose task finished")
	require.Zero(t, l.Count(t, `SELECT count(*) FROM notify_notification WHERE id = $1`, done.ID))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM notify_task WHERE id = $1`, delivered.ID))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM notify_attempt WHERE task_id = $1`, delivered.ID))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM job_all WHERE id = $1`, delivered.JobID))
	require.Zero(t, l.Count(t, `SELECT count(*) FROM job_event WHERE job_id = $1`, delivered.JobID))
	require.Equal(t, notify.TaskQueued, notifylab.LabTask(t, l.Get(t, live.ID), notify.ChannelEmail).State, "a live task keeps its notification")

	// The dedupe window.
	again := l.Submit(t, notifylab.LabEvent("user-0042", "order:ord-5001:shipped"))
	require.NotEqual(t, done.ID, again.ID, "past the retention the same event is a new notification")
	require.Equal(t, live.ID, l.Submit(t, notifylab.LabEvent("user-0042", "order:ord-5002:shipped")).ID, "a kept one still deduplicates")

	// NTF-I3 outside the purge's own statement: the new notification's
	// delivery leaves an attempt nobody may delete.
	jobs = l.ClaimAs(t, notify.ChannelEmail, "worker-1")
	require.NotEmpty(t, jobs)
	for _, j := range jobs {
		require.NoError(t, l.Jobs.Execute(ctx, j))
	}
	require.Positive(t, l.Count(t, `SELECT count(*) FROM notify_attempt`))
	_, err = l.Pool.Exec(ctx, `DELETE FROM notify_attempt`)
	require.ErrorContains(t, err, "append-only")
	e2etest.Assert(t, l.Pool, "notify", "claim")
}
