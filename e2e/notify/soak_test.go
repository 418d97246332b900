package notify_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/e2e/e2etest"
	notifylab "github.com/fencelab/fencelab/lab/notify"
	"github.com/fencelab/fencelab/services/notify"
)

// The soak: a few thousand events (some submitted twice) for users with
// different channel sets, delivered by a worker pool and the recovery loop
// through channels that misbehave — 10% of tasks' first send is committed
// and its response dropped, 5% answered 503, and 5% of sms tasks' first
// lookup answered 503. At the end every task is terminal or in review, the
// channels' ledgers hold no more than one message per email and sms task,
// every call is on record, and every NTF invariant holds. The fault plan is
// drawn per task before delivery starts, so the expected request counts
// are exact.
func TestNTFSoakFlakyChannelsDeliverEachTaskAtMostOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	l := e2etest.StartLab(t, notifylab.StartLab, e2etest.Options{MaxConns: 16, Settings: map[string]string{notify.EnvBackoffBase: "20ms", notify.EnvCallTimeout: "2s"}})
	ctx := context.Background()
	const users, events, dupEvery, submitters = 100, 2000, 10, 16

	channelSets := []map[string]bool{
		notifylab.AllChannels,
		{notify.ChannelEmail: true, notify.ChannelPush: true},
		{notify.ChannelSMS: true},
		{notify.ChannelEmail: true, notify.ChannelSMS: true},
	}
	for u := range users {
		l.Prefs(t, fmt.Sprintf("user-%04d", 1000+u), channelSets[u%len(channelSets)])
	}

	// Intake: every event once, every tenth twice; duplicates must name the
	// first submission's notification (NTF-I1).
	begin := time.Now()
	var next atomic.Int64
	ids := make([]int64, events)
	var wg sync.WaitGroup
	errs := e2etest.NewErrors(submitters)
	for range submitters {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= events {
					return
				}
				ev := notifylab.LabEvent(fmt.Sprintf("user-%04d", 1000+i%users), fmt.Sprintf("order:ord-%05d:shipped", i))
				n, err := l.SubmitErr(ev)
				if err != nil {
					errs.Add(err)
					return
				}
				ids[i] = n.ID
				if i%dupEvery == 0 {
					again, err := l.SubmitErr(ev)
					if err == nil && again.ID != n.ID {
						err = fmt.Errorf("duplicate of %s named notification %d, the first %d", ev.EventKey, again.ID, n.ID)
					}
					if err != nil {
						errs.Add(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	errs.Check(t) // on the test goroutine
	intake := time.Since(begin)

	// The fault plan, per task, on the task's first call of each kind.
	rows, err := l.Pool.Query(ctx, `SELECT channel, delivery_key FROM notify_task ORDER BY id`)
	require.NoError(t, err)
	type plan struct{ tasks, drops, errors, queryErrors int }
	plans := map[string]*plan{}
	for _, ch := range notify.Channels {
		plans[ch.Name] = &plan{}
	}
	rng := rand.New(rand.NewPCG(2024, 12))
	var channel, key string
	_, err = pgx.ForEachRow(rows, []any{&channel, &key}, func() error {
		p, srv := plans[channel], l.Channels[channel]
		p.tasks++
		switch r := rng.Float64(); {
		case r < 0.10:
			p.drops++
			srv.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Key: key, Times: 1, DropResponse: true})
			if channel == notify.ChannelSMS && rng.Float64() < 0.5 {
				p.queryErrors++
				srv.Inject(fakeprovider.Fault{Op: fakeprovider.OpQuery, Key: key, Times: 1, Status: 503})
			}
		case r < 0.15:
			p.errors++
			srv.Inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Key: key, Times: 1, Status: 503})
		}
		return nil
	})
	require.NoError(t, err)

	// Delivery: one pool over the three kinds, and the recovery loop.
	kinds := []string{"notify.email", "notify.sms", "notify.push"}
	begin = time.Now()
	runCtx, stop := context.WithCancel(ctx)
	var run sync.WaitGroup
	run.Go(func() {
		_ = l.Jobs.Work(runCtx, claim.PoolOptions{Workers: 32, Kinds: kinds, PollInterval: 50 * time.Millisecond})
	})
	run.Go(func() {
		_ = l.Jobs.RunRecovery(runCtx, claim.RecoveryOptions{Interval: 100 * time.Millisecond, Concurrency: 4})
	})
	require.Eventually(t, func() bool {
		return l.Count(t, `SELECT count(*) FROM job_all WHERE kind = ANY($1) AND state IN ('ready', 'running', 'unknown')`, kinds) == 0
	}, 2*time.Minute, 50*time.Millisecond, "every task terminal or in review")
	delivery := time.Since(begin)
	stop()
	run.Wait()

	// Ground truth: the channels' ledgers and request counters against the
	// tasks and the attempt rows.
	type taskRow struct {
		channel, key, state string
	}
	rows, err = l.Pool.Query(ctx, `SELECT t.channel, t.delivery_key, j.state FROM notify_task t JOIN job_all j ON j.id = t.job_id`)
	require.NoError(t, err)
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (taskRow, error) {
		var x taskRow
		return x, r.Scan(&x.channel, &x.key, &x.state)
	})
	require.NoError(t, err)
	states := map[string]map[string]int{}
	messages := map[string]int{} // per delivery key, from the channels' ledgers
	for _, ch := range notify.Channels {
		states[ch.Name] = map[string]int{}
		for _, e := range l.Channels[ch.Name].Effects() {
			messages[e.Reference]++
		}
	}
	for _, tk := range tasks {
		states[tk.channel][tk.state]++
		effects := messages[tk.key]
		switch tk.state {
		case string(claim.StateSucceeded):
			require.Equal(t, 1, effects, "%s %s delivered: exactly one message", tk.channel, tk.key)
		case string(claim.StateNeedsReview):
			require.LessOrEqual(t, effects, 1, "%s %s in review", tk.channel, tk.key)
		default:
			t.Fatalf("%s %s ended %s", tk.channel, tk.key, tk.state)
		}
	}
	require.Zero(t, l.Count(t, `SELECT count(*) FROM notify_attempt WHERE outcome = 'pending'`), "every call has its outcome")
	for _, ch := range notify.Channels {
		p, srv, st := plans[ch.Name], l.Channels[ch.Name], states[ch.Name]
		sends := l.Count(t, `SELECT count(*) FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id WHERE t.channel = $1 AND a.op = 'send'`, ch.Name)
		queries := l.Count(t, `SELECT count(*) FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id WHERE t.channel = $1 AND a.op = 'query'`, ch.Name)
		require.Equal(t, srv.Requests(fakeprovider.OpCreate), sends, "%s: every send on record (NTF-I3)", ch.Name)
		require.Equal(t, srv.Requests(fakeprovider.OpQuery), queries, "%s: every query on record (NTF-I3)", ch.Name)
		switch ch.Name {
		case notify.ChannelEmail: // dropped → resent with the same key; 503 → resent
			require.Equal(t, p.tasks, st["succeeded"])
			require.Equal(t, p.tasks+p.drops+p.errors, sends)
			require.Zero(t, queries)
		case notify.ChannelSMS: // dropped → looked up and found, never resent
			require.Equal(t, p.tasks, st["succeeded"])
			require.Equal(t, p.tasks+p.errors, sends)
			require.Equal(t, p.drops+p.queryErrors, queries)
		case notify.ChannelPush: // dropped → review with its one message
			require.Equal(t, p.tasks-p.drops, st["succeeded"])
			require.Equal(t, p.drops, st["needs_review"])
			require.Equal(t, p.tasks+p.errors, sends)
		}
		unknown := l.Count(t, `SELECT count(*) FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id
			WHERE t.channel = $1 AND a.op = 'send' AND a.outcome = 'unknown'`, ch.Name)
		require.Equal(t, p.drops, unknown, "%s: every dropped response is an unknown attempt", ch.Name)
		t.Logf("%-5s tasks %4d  drops %3d  503s %3d  → delivered %4d, review %3d; sends %4d (unknown %3d), queries %3d, messages %4d",
			ch.Name, p.tasks, p.drops, p.errors, st["succeeded"], st["needs_review"], sends, unknown, queries, len(srv.Effects()))
	}
	t.Logf("%d events (+%d resubmitted) for %d users in %v; %d tasks delivered or in review in %v (32 workers, test cluster, shared machine)",
		events, (events+dupEvery-1)/dupEvery, users, intake.Round(time.Millisecond), len(tasks), delivery.Round(time.Millisecond))
	require.Equal(t, events, l.Count(t, `SELECT count(*) FROM notify_notification`))
	e2etest.Assert(t, l.Pool, "notify")
	e2etest.Assert(t, l.Pool, "claim")
}
