package notify_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
	"github.com/fencelab/fencelab/services/notify"
)

// The NTF invariants are not vacuous: after a clean run they hold; rows
// that no code path writes — broken by hand, past the constraints and
// triggers that normally refuse them — are each reported.
func TestNTFInvariantsReportRowsThatBreakThem(t *testing.T) {
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{})
	ctx := context.Background()
	l.Prefs(t, "user-0042", notifylab.AllChannels)
	n := l.Submit(t, notifylab.LabEvent("user-0042", "order:ord-4001:shipped"))
	l.Prefs(t, "user-0042", map[string]bool{notify.ChannelEmail: true, notify.ChannelSMS: true})
	jobs, err := l.Jobs.Claim(ctx, claim.ClaimParams{Owner: "worker-1", Limit: 10,
		Kinds: []string{"notify.email", "notify.sms", "notify.push"}})
	require.NoError(t, err)
	for _, j := range jobs {
		require.NoError(t, l.Jobs.Execute(ctx, j))
	}
	e2etest.Assert(t, l.Pool, "notify")
	email, push := notifylab.LabTask(t, l.Get(t, n.ID), notify.ChannelEmail), notifylab.LabTask(t, l.Get(t, n.ID), notify.ChannelPush)
	require.Equal(t, notify.TaskCancelled, push.State)

	for _, sql := range []string{
		// NTF-I1: the constraint gone, a second notification for the event.
		`ALTER TABLE notify_notification DROP CONSTRAINT notify_notification_one_per_event`,
		`INSERT INTO notify_notification (user_id, event_key, template, submitted_by)
		 VALUES ('user-0042', 'order:ord-4001:shipped', 'order_shipped', 'svc-orders')`,
		// NTF-I2: a delivery job no task owns.
		`INSERT INTO job (kind, business_key) VALUES ('notify.email', 'rogue-1')`,
		// NTF-I4: a call without the task's key.
		`INSERT INTO notify_attempt (task_id, attempt_no, op, fence, worker, key_sent, outcome, finished_at)
		 VALUES (` + itoa(email.ID) + `, 2, 'send', 1, 'worker-1', 'some-other-key', 'failed', clock_timestamp())`,
		// NTF-I5: a send for the task the claim cancelled.
		`INSERT INTO notify_attempt (task_id, attempt_no, op, fence, worker, key_sent, outcome, finished_at)
		 VALUES (` + itoa(push.ID) + `, 1, 'send', 1, 'worker-1', '` + push.DeliveryKey + `', 'success', clock_timestamp())`,
		// NTF-I3: the trigger off, an attempt removed.
		`ALTER TABLE notify_attempt DISABLE TRIGGER notify_attempt_append_only`,
		`DELETE FROM notify_attempt WHERE task_id = ` + itoa(email.ID) + ` AND attempt_no = 1`,
	} {
		_, err := l.Pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	results := e2etest.Invariants().Run(ctx, l.Pool, "notify")
	require.Len(t, results, 6) // NTF-I1…I5 report the rows, NTF-S1 the dropped constraint and the disabled trigger
	for _, r := range results {
		require.NoError(t, r.Err, r.ID)
		require.False(t, r.Holds(), "%s should report the broken rows", r.ID)
		t.Logf("%s: %v", r.ID, r.Rows)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
