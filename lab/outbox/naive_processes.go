package outbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
)

// The naive version of outbox/two-processes runs its two consumers as real
// OS processes too. The product's worker cannot be made naive (the naive
// code never lives in the product), so each naive consumer is psql — the
// PostgreSQL client the lab already relies on — running naiveConsumerSQL:
// the consumer the chapter argues against, with its position unfenced and
// saved in a transaction of its own, after the effects' commit. SIGKILL
// between the two commits leaves the effects applied and the position
// where it was; the second process reads the same events and applies them
// again. OUTBOX-I3 counts the effect rows.

// naiveConsumerSQL is one naive consumer's run: apply every event after
// the saved position (effects and inbox rows, the inbox written but never
// consulted), commit; wait on stdin (the instant a SIGKILL finds it in);
// then save the position — no lease, no fence, no check of who else ran.
const naiveConsumerSQL = `
\set ON_ERROR_STOP on
BEGIN;
CREATE TEMP TABLE batch ON COMMIT DROP AS
SELECT e.id, e.tx_id, e.key, (e.payload ->> 'n')::bigint AS n
  FROM outbox_event e JOIN outbox_consumer c ON c.name = :'consumer'
 WHERE e.topic = :'topic' AND (e.tx_id, e.id) > (c.position_tx, c.position_id);
INSERT INTO outbox_demo_effect (event_id, key, n, owner, fence)
SELECT id, key, n, :'owner', 0 FROM batch ORDER BY tx_id, id;
INSERT INTO outbox_inbox (consumer, event_id, fence)
SELECT :'consumer', id, 0 FROM batch ON CONFLICT DO NOTHING;
SELECT coalesce((SELECT tx_id FROM batch ORDER BY tx_id DESC, id DESC LIMIT 1), c.position_tx)::text AS pos_tx,
       coalesce((SELECT id FROM batch ORDER BY tx_id DESC, id DESC LIMIT 1), c.position_id) AS pos_id
  FROM outbox_consumer c WHERE c.name = :'consumer' \gset
COMMIT;
\prompt 'applied; save the position? ' go
UPDATE outbox_consumer SET position_tx = :'pos_tx'::xid8, position_id = :pos_id WHERE name = :'consumer';
`

// psqlConsumer is one naive consumer process.
type psqlConsumer struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	exited chan error
}

func startNaiveConsumer(x *lab.X, db, script, name string) *psqlConsumer {
	x.Helper()
	bin := pgserver.FindBinDir()
	psql := filepath.Join(bin, "psql")
	if _, err := os.Stat(psql); err != nil {
		x.Fatalf("the naive outbox consumers are psql processes, and psql was not found (looked in %q): install the PostgreSQL client", bin)
	}
	c := &psqlConsumer{name: name, exited: make(chan error, 1)}
	c.cmd = exec.Command(psql, "-X", "-q", "-v", "consumer="+outbox.DemoConsumerName, "-v", "topic="+outbox.DemoTopic,
		"-v", "owner="+name, "-f", script, db)
	var err error
	c.stdin, err = c.cmd.StdinPipe()
	require.NoError(x, err)
	c.cmd.Stdout = io.Discard
	c.cmd.Stderr = &c.stderr
	require.NoError(x, c.cmd.Start())
	go func() { c.exited <- c.cmd.Wait() }()
	x.Cleanup(func() {
		_ = c.cmd.Process.Kill() // this experiment's own child; a no-op once it exited
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
		}
		if x.Failed() {
			x.Logf("%s stderr:\n%s", name, c.stderr.String())
		}
	})
	return c
}

// release answers the prompt: the consumer saves its position and exits.
func (c *psqlConsumer) release(x *lab.X) {
	x.Helper()
	_, err := io.WriteString(c.stdin, "\n")
	require.NoError(x, err)
	_ = c.stdin.Close()
}

func (c *psqlConsumer) wait(x *lab.X) error {
	x.Helper()
	select {
	case err := <-c.exited:
		c.exited <- err
		return err
	case <-time.After(lab.ProcWait):
		x.Fatalf("%s did not exit within %s; stderr:\n%s", c.name, lab.ProcWait, c.stderr.String())
		return nil
	}
}

// naiveTwoProcesses is the naive version of outbox/two-processes and its
// control, over the same 10,000 events in two halves.
func naiveTwoProcesses(x *lab.X) {
	ctx := context.Background()
	db := x.Database()
	pool := labkit.Pool(x, db)
	require.NoError(x, outbox.Register(ctx, pool, outbox.DemoConsumer()))
	script := filepath.Join(x.TempDir(), "naive-consumer.sql")
	require.NoError(x, os.WriteFile(script, []byte(naiveConsumerSQL), 0o600))

	appendRounds(x, pool, 1, 50)
	x.Say("producer", "append rounds 1–50: 5,000 events over 100 keys, from 8 interleaved transactions")
	a := startNaiveConsumer(x, db, script, "process-A")
	lab.WaitFor(x, lab.DefaultWait, "process-A's batch to commit", func() bool { return outboxEffects(x, pool) >= 5000 })
	var appliedAt time.Time
	require.NoError(x, pool.QueryRow(ctx, `SELECT max(applied_at) FROM outbox_demo_effect`).Scan(&appliedAt))
	x.Step(lab.Step{Actor: "process-A", Action: fmt.Sprintf("pid %d (psql): apply 5,000 events, commit; the position is saved next, in its own transaction", a.cmd.Process.Pid),
		Outcome: "5000 applied", DBTime: appliedAt})
	if x.Control {
		a.release(x)
		require.NoError(x, a.wait(x), "process-A saves its position and exits; stderr:\n%s", a.stderr.String())
		x.Step(lab.Step{Actor: "process-A", Action: "save the position past the batch (no kill)", Outcome: "exited 0"})
	} else {
		require.NoError(x, a.cmd.Process.Signal(syscall.SIGKILL))
		_ = a.wait(x) // killed: a non-nil exit status is the point
		x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("SIGKILL process-A (pid %d) between its effects' commit and its position's", a.cmd.Process.Pid), Outcome: "killed",
			Note: "the effects are committed; the position is not"})
	}
	var (
		posTx string
		posID int64
		after int
	)
	require.NoError(x, pool.QueryRow(ctx, `
		SELECT c.position_tx::text, c.position_id,
		       (SELECT count(*) FROM outbox_event e WHERE e.topic = $2 AND (e.tx_id, e.id) > (c.position_tx, c.position_id))
		  FROM outbox_consumer c WHERE c.name = $1`, outbox.DemoConsumerName, outbox.DemoTopic).Scan(&posTx, &posID, &after))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: the saved position is (tx %s, event %d); %d events after it", posTx, posID, after)})
	if x.Control {
		require.Zero(x, after, "the saved position is past every event process-A applied")
	} else {
		require.Equal(x, 5000, after, "the kill left the position where it was")
	}

	appendRounds(x, pool, 51, 100)
	x.Say("producer", "append rounds 51–100: 5,000 more events")
	b := startNaiveConsumer(x, db, script, "process-B")
	b.release(x) // its answer waits in the pipe: it saves its position as soon as it asks
	require.NoError(x, b.wait(x), "process-B applies from the saved position and exits; stderr:\n%s", b.stderr.String())
	var byB int
	require.NoError(x, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_demo_effect WHERE owner = 'process-B'`).Scan(&byB))
	x.Step(lab.Step{Actor: "process-B", Action: fmt.Sprintf("pid %d (psql): read from the saved position, apply, save the position", b.cmd.Process.Pid),
		Outcome: fmt.Sprintf("%d applied", byB)})

	var rows, distinct int
	require.NoError(x, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM outbox_demo_effect`).Scan(&rows, &distinct))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effect rows for %d distinct events", rows, distinct)})
	x.Figure("os_processes", 2)
	x.Figure("events", 10000)
	x.Figure("effects", rows)
	x.Figure("distinct_events", distinct)
	require.Equal(x, 10000, distinct, "every event was applied at least once")
	if x.Control {
		require.Equal(x, 5000, byB, "without the kill, process-B applies only the second half")
	} else {
		require.Equal(x, 10000, byB, "after the kill, process-B applies the first half again")
	}
	_, err := pool.Exec(ctx, `ANALYZE outbox_event, outbox_inbox, outbox_consumer`)
	require.NoError(x, err)
}
