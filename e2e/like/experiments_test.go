package like_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg/pgtest"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/social/like"
)

// TestLIKE01StormWithDuplicatedDeliveryCountsEachChangeOnce: 50 users
// like and unlike 10 items over HTTP, a quarter of their clicks doubled.
// Two counter runners compete for the lease, and three times during the
// storm the counter's position is reset to zero, so every event so far is
// delivered again. The bound holds at every sampled moment (LIKE-I4);
// after catch-up every count equals its liked facts (LIKE-I3), every fact
// has one version per answered change and one event per version (LIKE-I1,
// LIKE-I2), and every event is in the inbox once.
func TestLIKE01StormWithDuplicatedDeliveryCountsEachChangeOnce(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	ids := items(t, a, 10)
	s := newStorm(t, a, 50, ids)
	bound := sampleBound(t, a.Pool)
	stop1 := running(t, counter(t, a, "runner-1"))
	stop2 := running(t, counter(t, a, "runner-2"))

	stormDone := make(chan struct{})
	go func() { defer close(stormDone); s.run(t, 1, 40) }()

	ctx := context.Background()
	resets := 0
	for resets < 3 {
		// Each replay starts once the counter has applied more than at the
		// previous one, so it redelivers a real backlog.
		want := int64(300 * (resets + 1))
		require.Eventually(t, func() bool { return inboxRows(t, a.Pool) >= want }, time.Minute, 5*time.Millisecond)
		_, err := a.Pool.Exec(ctx, `UPDATE outbox_consumer SET position_tx = '0', position_id = 0 WHERE name = $1`, like.ConsumerName)
		require.NoError(t, err)
		resets++
	}
	<-stormDone
	stop1()
	stop2()
	catchUp(t, a)
	bound.stop()

	checked := s.checkFacts(t, a.Pool)
	events := eventsOnce(t, a.Pool)
	total := checkCounts(t, a, ids)
	e2etest.Assert(t, a.Pool, likeInvariants...)
	require.Zero(t, s.failed.Load(), "every click is answered")
	require.Greater(t, bound.samples.Load(), int64(3), "LIKE-I4 sampled during the storm")
	logFigures(t, map[string]any{"clicks": s.clicks.Load(), "events": events, "position_resets": resets,
		"facts_checked": checked, "likes_at_end": total, "bound_samples": bound.samples.Load()})
}

// TestLIKE02CounterProcessKilledMidBatch: the counter runs as its own OS
// process (`fencelab worker --tasks outbox:social.likes`) over a backlog
// while the storm goes on. The first process is killed with SIGKILL while
// it applies the backlog; the second is paused inside its batch
// transaction — counts, inbox rows and position written, not committed —
// and killed there; nothing of that batch survives. A third finishes. The
// bound holds throughout, and after catch-up every count is exact.
func TestLIKE02CounterProcessKilledMidBatch(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	ids := items(t, a, 10)
	s := newStorm(t, a, 50, ids)
	bound := sampleBound(t, a.Pool)
	s.run(t, 2, 30) // the backlog

	stormDone := make(chan struct{})
	go func() { defer close(stormDone); s.run(t, 3, 20) }()

	// 1. Killed at whatever point of the backlog it has reached.
	w1 := startWorker(t, a.DBURL)
	require.Eventually(t, func() bool { return inboxRows(t, a.Pool) >= 500 }, time.Minute, 5*time.Millisecond)
	w1.Kill9(t)
	waitSessionsGone(t, a)
	expireLease(t, a.Pool)
	afterKill1 := inboxRows(t, a.Pool)

	// 2. Paused inside a batch transaction, then killed.
	w2 := startWorker(t, a.DBURL, "--pause-at", like.PointApplied)
	require.Equal(t, "PAUSED "+like.PointApplied+" "+like.ConsumerName, w2.Line(t, time.Minute))
	ctx := context.Background()
	var open int
	require.NoError(t, a.Pool.QueryRow(ctx, `
		SELECT count(*) FROM pg_stat_activity
		 WHERE datname = current_database() AND application_name = 'fencelab-worker' AND state = 'idle in transaction'`).Scan(&open))
	require.Equal(t, 1, open, "the worker is inside its batch transaction")
	before := countsAndInbox(t, a)
	w2.Kill9(t)
	waitSessionsGone(t, a)
	require.Equal(t, before, countsAndInbox(t, a), "nothing of the killed batch committed")
	expireLease(t, a.Pool)

	// 3. A third process finishes the job and stops gracefully.
	w3 := startWorker(t, a.DBURL)
	<-stormDone
	waitCaughtUp(t, a.Pool, 2*time.Minute)
	require.NoError(t, w3.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w3.Wait(t, e2etest.DefaultWait), "graceful stop")
	bound.stop()

	var fences int64
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT fence FROM outbox_consumer WHERE name = $1`, like.ConsumerName).Scan(&fences))
	require.Equal(t, int64(3), fences, "three processes held the lease in turn")
	s.checkFacts(t, a.Pool)
	events := eventsOnce(t, a.Pool)
	total := checkCounts(t, a, ids)
	e2etest.Assert(t, a.Pool, likeInvariants...)
	require.Greater(t, bound.samples.Load(), int64(3))
	logFigures(t, map[string]any{"clicks": s.clicks.Load(), "events": events, "applied_before_kill_1": afterKill1,
		"applied_before_kill_2": before.inbox, "likes_at_end": total, "bound_samples": bound.samples.Load()})
}

// waitSessionsGone waits for the server to notice a killed worker's
// connections (and roll back what they had open).
func waitSessionsGone(t *testing.T, a *e2etest.App) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		_ = a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'fencelab-worker'`).Scan(&n)
		return n == 0
	}, 30*time.Second, 5*time.Millisecond, "the killed worker's sessions end")
}

type snapshot struct {
	counts string
	inbox  int64
}

func countsAndInbox(t *testing.T, a *e2etest.App) snapshot {
	t.Helper()
	var s snapshot
	require.NoError(t, a.Pool.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(item_id || '=' || n, ',' ORDER BY item_id), ''),
		       (SELECT count(*) FROM outbox_inbox WHERE consumer = $1)
		  FROM social_like_count`, like.ConsumerName).Scan(&s.counts, &s.inbox))
	return s
}

// TestLIKE03DatabaseStoppedImmediatelyMidStorm: the app (its pool and its
// counter task) runs against a PostgreSQL server of its own. Mid-storm,
// with the counter paused inside a batch, the server is stopped in
// immediate mode (SIGQUIT: no checkpoint, crash recovery on start) and
// started again. The app is not restarted: requests fail while the server
// is away and succeed again after, and the counter resumes on its own. The
// batch in flight is lost and applied again, once. The bound holds at
// every sample the database answered; every click that was answered is
// durable (commits are synchronous); after catch-up every count is exact.
func TestLIKE03DatabaseStoppedImmediatelyMidStorm(t *testing.T) {
	t.Parallel()
	srv := pgtest.Dedicated(t)
	url := pgtest.URLOn(t, srv)
	// The dedicated server runs with synchronous_commit=off (test speed);
	// this experiment checks that acknowledged clicks survive, so its
	// sessions commit synchronously.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	a := e2etest.Start(t, e2etest.Options{DBURL: url + sep + "synchronous_commit=on", Tasks: true})
	ids := items(t, a, 10)
	s := newStorm(t, a, 50, ids)
	bound := sampleBound(t, a.Pool)

	stormDone := make(chan struct{})
	go func() { defer close(stormDone); s.run(t, 4, 60) }()
	require.Eventually(t, func() bool { return inboxRows(t, a.Pool) >= 400 }, time.Minute, 5*time.Millisecond)

	gate := a.Faults.Pause(like.PointApplied, like.ConsumerName)
	<-gate.Reached()
	inFlight := countsAndInbox(t, a)
	require.NoError(t, srv.Stop("immediate"))
	gate.Release() // its commit meets a dead connection
	failedAtStop := s.failed.Load()
	require.Eventually(t, func() bool { return s.failed.Load() >= failedAtStop+20 }, time.Minute, 5*time.Millisecond,
		"clicks fail while the server is away")
	okAtRestart := s.ok.Load()
	require.NoError(t, srv.Start(context.Background()))

	<-stormDone
	waitCaughtUp(t, a.Pool, 2*time.Minute)
	bound.stop()

	require.Greater(t, s.ok.Load(), okAtRestart+100, "the app's pool reconnected without a restart")
	require.Greater(t, inboxRows(t, a.Pool), inFlight.inbox, "the counter task resumed on its own")
	checked := s.checkFacts(t, a.Pool)
	events := eventsOnce(t, a.Pool)
	total := checkCounts(t, a, ids)
	e2etest.Assert(t, a.Pool, likeInvariants...)
	require.Greater(t, bound.samples.Load(), int64(3))
	logFigures(t, map[string]any{"clicks": s.clicks.Load(), "failed_clicks": s.failed.Load(), "events": events,
		"facts_fully_answered": checked, "likes_at_end": total, "bound_samples": bound.samples.Load(),
		"bound_samples_refused": bound.errs.Load()})
}

// TestLIKE04RecomputeBesideOnlineIncrements: a full recompute, three items
// per transaction, runs while the storm goes on and the counter has a
// backlog. Its first chunk is held open after counting while a like of one
// of its items commits (the snapshot did not see it: the counter must add
// it) and while the counter waits for its lock; the events the snapshot
// did see but the counter had not applied are skipped later. The
// recompute finds nothing to correct, the bound holds throughout, and
// after catch-up every count is exact. Then the same race without a
// watermark double-counts — LIKE-I3 reports it — and the recompute
// repairs it and says so.
func TestLIKE04RecomputeBesideOnlineIncrements(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{
		Settings: map[string]string{"FENCELAB_SOCIAL_LIKE_RECOMPUTE_CHUNK": "3"},
	})
	ids := items(t, a, 10)
	s := newStorm(t, a, 50, ids)
	bound := sampleBound(t, a.Pool)
	stopCounter := running(t, counter(t, a, "runner-1"))
	admin := a.Token(t, "admin-1", httpx.RoleAdmin)
	ctx := context.Background()

	stormDone := make(chan struct{})
	go func() { defer close(stormDone); s.run(t, 5, 40) }()
	require.Eventually(t, func() bool { return inboxRows(t, a.Pool) >= 300 }, time.Minute, 5*time.Millisecond)

	// Hold the counter between batches until a backlog builds up.
	held := a.Faults.Pause(outbox.PointBeforeBatch, like.ConsumerName)
	<-held.Reached()
	require.Eventually(t, func() bool { n, err := unapplied(ctx, a.Pool); return err == nil && n >= 50 },
		time.Minute, 5*time.Millisecond)

	// A like of the first item, written and not committed.
	late := "user-0300"
	lateGate := a.Faults.Pause(like.PointBeforeCommit, fmt.Sprintf("%d>%s", ids[0], late))
	lateDone := a.Go(e2etest.Req{Method: http.MethodPost, Path: fmt.Sprintf("/social/items/%d/like", ids[0]),
		Token: a.Token(t, late, httpx.RoleUser)})
	<-lateGate.Reached()

	// The recompute's first chunk counts (without the late like) and waits.
	chunkGate := a.Faults.Pause(like.PointRecounted, "")
	recountDone := a.Go(recomputeReq(admin, ""))
	<-chunkGate.Reached()
	held.Release()
	e2etest.WaitForLockWaiters(t, a.Pool, "UPDATE outbox_consumer", 1) // the counter's batch waits for the recompute
	lateGate.Release()
	require.Equal(t, http.StatusOK, lateDone.Wait(t).Status)
	chunkGate.Release()
	first := recountOf(t, recountDone.Wait(t))
	require.Equal(t, len(ids), first.Items)
	require.Equal(t, 4, first.Chunks)
	require.Positive(t, first.EventsAhead, "the recompute counted events the counter had not applied")
	require.Zero(t, first.Drifted, "nothing to correct: %+v", first.Corrected)

	// The late like is not in the first chunk's watermark: the counter adds it.
	var lateSeen bool
	require.NoError(t, a.Pool.QueryRow(ctx, `
		SELECT pg_visible_in_snapshot(e.tx_id, c.counted_through)
		  FROM outbox_event e JOIN social_like_count c ON c.item_id::text = e.key
		 WHERE e.topic = 'social.like' AND e.key = $1 AND e.payload->>'user_id' = $2`,
		fmt.Sprint(ids[0]), late).Scan(&lateSeen))
	require.False(t, lateSeen, "the late like committed after the snapshot")

	// Two more full recomputes while the storm goes on, unhindered.
	for range 2 {
		rc := recompute(t, a, admin, "")
		require.Zero(t, rc.Drifted, "nothing to correct: %+v", rc.Corrected)
	}
	<-stormDone
	stopCounter()
	catchUp(t, a)
	bound.stop()
	s.checkFacts(t, a.Pool)
	eventsOnce(t, a.Pool)
	total := checkCounts(t, a, ids)
	e2etest.Assert(t, a.Pool, likeInvariants...)
	require.Greater(t, bound.samples.Load(), int64(3))

	// The same race without recording the watermark: the recount includes
	// a backlog the counter then applies again.
	for i := range ids {
		u := fmt.Sprintf("user-%04d", 400+i)
		resp := a.Do(t, e2etest.Req{Method: http.MethodPost, Path: fmt.Sprintf("/social/items/%d/like", ids[i]),
			Token: a.Token(t, u, httpx.RoleUser)})
		require.Equal(t, http.StatusOK, resp.Status)
	}
	_, err := a.Pool.Exec(ctx, `UPDATE social_like_count c
		SET n = (SELECT count(*) FROM social_like f WHERE f.item_id = c.item_id AND f.liked), counted_through = NULL`)
	require.NoError(t, err)
	catchUp(t, a)
	res := e2etest.Invariants().Run(ctx, a.Pool, "LIKE-I3")
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Len(t, res[0].Rows, len(ids), "LIKE-I3 reports every double-counted item")
	repair := recompute(t, a, admin, "")
	require.Equal(t, len(ids), repair.Drifted)
	for _, c := range repair.Corrected {
		require.Equal(t, c.Before-1, c.After, "item %d was counted twice once", c.ItemID)
		require.Equal(t, int64(1), c.Drift)
	}
	e2etest.Assert(t, a.Pool, likeInvariants...)
	logFigures(t, map[string]any{"clicks": s.clicks.Load(), "events_ahead_of_counter": first.EventsAhead,
		"likes_at_end": total, "bound_samples": bound.samples.Load(), "repaired": repair.Drifted})
}

func recompute(t *testing.T, a *e2etest.App, token, query string) like.Recount {
	t.Helper()
	return recountOf(t, a.Do(t, recomputeReq(token, query)))
}

func recomputeReq(token, query string) e2etest.Req {
	return e2etest.Req{Method: http.MethodPost, Path: "/social/admin/likes/recompute" + query, Token: token}
}

func recountOf(t *testing.T, resp e2etest.Response) like.Recount {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	var rc like.Recount
	resp.JSON(t, &rc)
	return rc
}

func logFigures(t *testing.T, m map[string]any) {
	b, _ := json.Marshal(m)
	t.Logf("%s", b)
}

// The lab's likes experiment: the whole stream delivered again is counted
// once (and the naive counter without its inbox counts it twice).
func TestLIKELabRedeliveryCountedOnce(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, like.RedeliveryCountedOnce)
}
