package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// startWorker runs `fencelab worker --start-gate` with the demo consumer
// and waits until it is at its gate.
func startWorker(t *testing.T, dbURL string) *e2etest.Child {
	t.Helper()
	w := e2etest.StartChild(t, "worker", e2etest.ChildEnv(dbURL, "FENCELAB_OUTBOX_DEMO=1"), "worker", "--start-gate")
	require.Equal(t, "READY", w.Line(t, 30*time.Second))
	return w
}

// appendRounds appends rounds [from, to] of the demo stream: in round r,
// every key k-00..k-99 gets one event with n = r. Eight appenders each own
// a slice of the keys and commit their rounds one after another, so a
// key's events are appended (and committed) in n order, while the eight
// appenders' transactions interleave and commit out of id order.
func appendRounds(t *testing.T, pool *pgxpool.Pool, from, to int) {
	t.Helper()
	const appenders, keys = 8, 100
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := from; r <= to; r++ {
				var msgs []outbox.Message
				for k := g; k < keys; k += appenders {
					msgs = append(msgs, outbox.Message{Topic: outbox.DemoTopic, Key: fmt.Sprintf("k-%02d", k),
						Payload: outbox.DemoPayload{N: int64(r)}})
				}
				err := pg.InTx(context.Background(), pool, func(tx pgx.Tx) error {
					_, err := outbox.AppendMany(context.Background(), tx, msgs)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func effects(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_demo_effect`).Scan(&n))
	return n
}

// waitEffects polls the effect table until it holds at least n rows.
func waitEffects(t *testing.T, pool *pgxpool.Pool, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return effects(t, pool) >= n }, within, 10*time.Millisecond,
		"demo consumer did not reach %d effects", n)
}

// Two real `fencelab worker` processes run the same consumer over 10,000
// events. Half-way, the one holding the lease is killed with SIGKILL in
// the middle of its work and its lease expiry is forced with SQL; the
// other takes over with a higher fence and finishes. Ground truth is the
// effect table: every event applied exactly once, each key's events in
// order, and both processes did part of the work.
func TestOutboxTwoConsumerProcesses(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	ctx := context.Background()
	workers := map[int]*e2etest.Child{}
	for range 2 {
		w := startWorker(t, a.DBURL)
		workers[w.Pid()] = w
	}
	for _, w := range workers {
		w.Send(t) // open both start gates
	}

	appendRounds(t, a.Pool, 1, 50)
	waitEffects(t, a.Pool, 1000, time.Minute)

	// Kill the lease holder mid-stream.
	var owner string
	var fence1 int64
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT owner, fence FROM outbox_consumer WHERE name = $1`,
		outbox.DemoConsumerName).Scan(&owner, &fence1))
	var victim int
	_, err := fmt.Sscanf(strings.Split(owner, ":")[1], "%d", &victim)
	require.NoError(t, err)
	require.Contains(t, workers, victim, "the lease holder is one of our workers")
	workers[victim].Kill9(t)
	killedAt := effects(t, a.Pool)
	_, err = a.Pool.Exec(ctx, `UPDATE outbox_consumer SET lease_until = now() WHERE name = $1 AND owner = $2`,
		outbox.DemoConsumerName, owner)
	require.NoError(t, err)

	appendRounds(t, a.Pool, 51, 100)
	waitEffects(t, a.Pool, 10000, 2*time.Minute)

	// Let the survivor stop gracefully (it releases its lease).
	for pid, w := range workers {
		if pid != victim {
			require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, w.Wait(t, e2etest.DefaultWait), "graceful stop")
		}
	}

	var (
		rows, distinct, owners, outOfOrder, wrongCount int
		fence2                                         int64
	)
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id), count(DISTINCT owner), max(fence)
		FROM outbox_demo_effect`).Scan(&rows, &distinct, &owners, &fence2))
	// Every demo event has exactly one effect row.
	var missingOrDouble int
	require.NoError(t, a.Pool.QueryRow(ctx, `
		SELECT count(*) FROM outbox_event e
		  LEFT JOIN (SELECT event_id, count(*) AS n FROM outbox_demo_effect GROUP BY event_id) f ON f.event_id = e.id
		 WHERE e.topic = $1 AND COALESCE(f.n, 0) <> 1`, outbox.DemoTopic).Scan(&missingOrDouble))
	// Per key, effects were applied in n order: 1, 2, …, 100.
	require.NoError(t, a.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE n <> rank) FROM (
		  SELECT n, row_number() OVER (PARTITION BY key ORDER BY seq) AS rank FROM outbox_demo_effect) x`).Scan(&outOfOrder))
	require.NoError(t, a.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT key FROM outbox_demo_effect GROUP BY key HAVING count(*) <> 100) x`).Scan(&wrongCount))

	result, _ := json.Marshal(map[string]any{
		"os_processes": 2, "events": 10000, "effects": rows, "distinct_events": distinct,
		"owners": owners, "effects_before_kill": killedAt, "fences": []int64{fence1, fence2},
		"out_of_order": outOfOrder,
	})
	t.Logf("%s", result)
	require.Equal(t, 10000, rows)
	require.Equal(t, 10000, distinct)
	require.Zero(t, missingOrDouble, "every event has exactly one effect")
	require.Zero(t, outOfOrder, "each key's events applied in order")
	require.Zero(t, wrongCount)
	require.Equal(t, 2, owners, "both processes applied part of the stream")
	require.Greater(t, fence2, fence1)
	e2etest.Assert(t, a.Pool, "outbox")
}

// The consumer table is an admin view; its lag is also a metric.
func TestOutboxConsumersEndpointIsAdminOnly(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	ctx := context.Background()
	require.NoError(t, outbox.Register(ctx, a.Pool, outbox.DemoConsumer()))
	appendRounds(t, a.Pool, 1, 1)

	r := a.Do(t, e2etest.Req{Method: "GET", Path: "/outbox/consumers", Token: a.Token(t, "user-0042", httpx.RoleUser)})
	require.Equal(t, 403, r.Status)
	r = a.Do(t, e2etest.Req{Method: "GET", Path: "/outbox/consumers"})
	require.Equal(t, 401, r.Status)

	r = a.Do(t, e2etest.Req{Method: "GET", Path: "/outbox/consumers", Token: a.Token(t, "admin-0001", httpx.RoleAdmin)})
	require.Equal(t, 200, r.Status, string(r.Body))
	var body struct {
		Consumers []outbox.ConsumerStatus `json:"consumers"`
	}
	r.JSON(t, &body)
	require.Len(t, body.Consumers, 1)
	require.Equal(t, outbox.DemoConsumerName, body.Consumers[0].Name)
	require.EqualValues(t, 100, body.Consumers[0].LagEvents)

	m := a.Do(t, e2etest.Req{Method: "GET", Path: "/metrics"})
	require.Contains(t, string(m.Body), `fencelab_outbox_lag_events{consumer="outbox.demo"} 100`)

	// `fencelab check outbox` runs the invariants and shows positions and lag.
	cmd := exec.Command(e2etest.Binary(t), "check", "outbox")
	cmd.Env = e2etest.ChildEnv(a.DBURL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "ok    OUTBOX-I2")
	require.Regexp(t, `outbox\.demo\s+outbox\.demo\s+\(0,0\)\s+0\s+100\s`, string(out))
	e2etest.Assert(t, a.Pool, "outbox")
}
