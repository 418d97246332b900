// Package failover is chapter 14's experiments: what a primary's loss keeps.
package failover

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/lab/require"
)

// Experiments are chapter 14's runnable claims that need nothing
// but the local PostgreSQL binaries (e2e/cluster keeps the Patroni
// topology).
var Experiments = []lab.Experiment{SyncKeepsAcknowledged}

// SyncKeepsAcknowledged is chapter 14 on one machine: a primary and a
// streaming standby made with pg_basebackup, the standby reaching its
// primary through a link the experiment can stall (a TCP relay: the
// network between two hosts). The client writes 1–3, which the standby
// replays; the link stalls; the client writes again; the primary is
// stopped immediately (SIGQUIT, as pg_ctl stop -m immediate) and the
// standby promoted. The client's receipts are compared with what the new
// primary holds (FO-I1).
//
// Guarded, the standby is synchronous (synchronous_standby_names, and
// synchronous_commit=on in the client's sessions): write 4 waits for the
// standby (seen as wait_event SyncRep) and is never acknowledged, so every
// receipt has its row. Naive, the standby is asynchronous: writes 4–6 are
// acknowledged at once, held in the stalled link, and die with the
// primary. The stall is what makes the loss certain rather than lucky:
// without it the standby usually, not always, has the writes in time. Its
// control is the same asynchronous standby without the stall: it has
// replayed every write (observed on pg_stat_replication) when the primary
// dies.
var SyncKeepsAcknowledged = lab.Experiment{
	ID:         "failover/sync-keeps-acknowledged",
	Test:       "TestSyncStandbyKeepsEveryAcknowledgedWrite",
	Claim:      "a primary with a synchronous standby dies while replication stalls: the promoted standby holds every write the client was told committed",
	Invariants: []string{"FO-I1"},
	Naive:      "an asynchronous standby: a commit is acknowledged before the standby has it, so the writes acknowledged during the stall die with the primary",
	Catches:    []string{"FO-I1"},
	Control:    "the same asynchronous standby without the stall: it has replayed every write when the primary dies",
	Run:        runSyncKeepsAcknowledged,
}

// receipt is what the client was told: write seq committed.
type receipt struct {
	seq int
	at  any // the database clock at the commit, as the client saw it
}

func runSyncKeepsAcknowledged(x *lab.X) {
	ctx := context.Background()
	primary := x.Env.Dedicated(x.T)
	admin := failoverConn(x, primary.URL("postgres"))
	_, err := admin.Exec(ctx, `CREATE DATABASE failover_lab`)
	require.NoError(x, err)
	client := failoverConn(x, primary.URL("failover_lab"))
	_, err = client.Exec(ctx, `
		CREATE TABLE failover_write (seq int PRIMARY KEY, written_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TABLE failover_receipt (seq int PRIMARY KEY, acknowledged_at timestamptz NOT NULL)`)
	require.NoError(x, err)

	link, err := newReplLink(net.JoinHostPort(primary.Host, strconv.Itoa(primary.Port)))
	require.NoError(x, err)
	x.Cleanup(link.Close)
	standby, err := primary.StartStandby(ctx, "127.0.0.1", link.Port(), "standby1", pgserver.Options{Ephemeral: true}) // max_connections ≥ the primary's, as a hot standby needs
	require.NoError(x, err, "pg_basebackup and start the standby")
	x.Cleanup(func() { _ = standby.Close() })

	want := "async"
	if !x.Naive {
		want = "sync"
		_, err = admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'standby1'`)
		require.NoError(x, err)
		_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
		require.NoError(x, err)
	}
	lab.WaitFor(x, 0, "the standby to stream as "+want, func() bool {
		var n int
		require.NoError(x, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
		                                          WHERE application_name = 'standby1' AND state = 'streaming' AND sync_state = $1`, want).Scan(&n))
		return n == 1
	})
	x.Step(lab.Step{Actor: "db", Action: "primary and a standby made with pg_basebackup, streaming through a link the experiment can stall",
		Outcome: "streaming", Note: "pg_stat_replication.sync_state = " + want})

	var receipts []receipt
	write := func(c *pgx.Conn, seq int) (receipt, error) {
		r := receipt{seq: seq}
		err := c.QueryRow(ctx, `INSERT INTO failover_write (seq) VALUES ($1) RETURNING clock_timestamp()`, seq).Scan(&r.at)
		return r, err
	}
	ack := func(from, to int) {
		for seq := from; seq <= to; seq++ {
			r, err := write(client, seq)
			if err != nil {
				x.Error("client", fmt.Sprintf("write %d", seq), err)
				x.FailNow()
			}
			receipts = append(receipts, r)
			x.Step(lab.Step{Actor: "client", Action: fmt.Sprintf("write %d", seq), Outcome: "acknowledged"})
		}
	}
	caughtUp := func(what string) {
		lab.WaitFor(x, 0, "the standby to replay "+what, func() bool {
			var ok bool
			require.NoError(x, admin.QueryRow(ctx, `SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false)
			                                           FROM pg_stat_replication WHERE application_name = 'standby1'`).Scan(&ok))
			return ok
		})
		x.Step(lab.Step{Actor: "standby", Action: "replayed " + what, Note: "replay_lsn reached the primary's WAL position"})
	}

	ack(1, 3)
	caughtUp("writes 1–3")
	if !x.Control {
		link.Pause()
		x.Step(lab.Step{Actor: "network", Action: "the replication link stalls: the standby receives nothing more"})
	}

	var blocked *lab.Async[receipt]
	if x.Naive {
		ack(4, 6)
		if x.Control {
			caughtUp("writes 4–6")
		}
	} else {
		second := failoverConn(x, primary.URL("failover_lab"))
		blocked = lab.Go(func() (receipt, error) { return write(second, 4) })
		lab.WaitFor(x, 0, "write 4's commit to wait for the standby", func() bool {
			var n int
			require.NoError(x, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n))
			return n == 1
		})
		x.Step(lab.Step{Actor: "client", Action: "write 4", Outcome: "waiting", Note: "its commit waits for the standby (wait_event SyncRep): not acknowledged"})
	}

	require.NoError(x, primary.Stop("immediate"))
	x.Step(lab.Step{Actor: "db", Action: "the primary is stopped immediately (SIGQUIT, as pg_ctl stop -m immediate)", Outcome: "down"})
	if blocked != nil {
		r, err := blocked.Result(x)
		if err == nil { // told committed after all: it is a receipt like the others
			receipts = append(receipts, r)
			x.Step(lab.Step{Actor: "client", Action: "write 4", Outcome: "acknowledged"})
		} else {
			x.Step(lab.Step{Actor: "client", Action: "write 4", Outcome: "no answer", Note: "never acknowledged: " + err.Error()})
		}
	}
	link.Close()
	x.Step(lab.Step{Actor: "network", Action: "the link closes; what it held is lost with the primary"})

	promoter := failoverConn(x, standby.URL("postgres"))
	var promoted bool
	require.NoError(x, promoter.QueryRow(ctx, `SELECT pg_promote(true, 60)`).Scan(&promoted))
	require.True(x, promoted, "pg_promote")
	x.Step(lab.Step{Actor: "standby", Action: "promoted (pg_promote)", Outcome: "new primary"})

	newPrimary := standby.URL("failover_lab")
	survivor := failoverConn(x, newPrimary)
	var held []int32
	require.NoError(x, survivor.QueryRow(ctx, `SELECT coalesce(array_agg(seq ORDER BY seq), '{}') FROM failover_write`).Scan(&held))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read on the new primary: writes %v", held)})
	for _, r := range receipts {
		_, err := survivor.Exec(ctx, `INSERT INTO failover_receipt (seq, acknowledged_at) VALUES ($1, $2)`, r.seq, r.at)
		require.NoError(x, err)
	}
	x.Step(lab.Step{Actor: "client", Action: fmt.Sprintf("record its %d receipts on the new primary", len(receipts))})
	x.CheckOn(newPrimary)

	mode := "synchronous"
	if x.Naive {
		mode = "asynchronous"
	}
	x.Figure("standby", mode)
	x.Figure("acknowledged", len(receipts))
	x.Figure("on_new_primary", len(held))
	if !x.Naive {
		for _, r := range receipts {
			require.Contains(x, held, int32(r.seq), "an acknowledged write survived the failover")
		}
	}
}

// failoverConn is one session with synchronous_commit on: the test
// servers turn it off for speed, and a commit acknowledged without waiting
// is exactly what the guarded run must not do.
func failoverConn(x *lab.X, url string) *pgx.Conn {
	x.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(x, err)
	cfg.RuntimeParams["synchronous_commit"] = "on"
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(x, err)
	x.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// replLink relays TCP from the standby to the primary; Pause stops what
// flows from the primary to the standby (held in the relay, never
// delivered), as a stalled network would. Close drops everything.
type replLink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	closed bool
	conns  []net.Conn
}

func newReplLink(target string) (*replLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &replLink{ln: ln, target: target}
	l.cond = sync.NewCond(&l.mu)
	go l.serve()
	return l, nil
}

func (l *replLink) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

func (l *replLink) serve() {
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_, _ = down.Close(), up.Close()
			return
		}
		l.conns = append(l.conns, down, up)
		l.mu.Unlock()
		go l.relay(up, down, false) // standby → primary: replies, always
		go l.relay(down, up, true)  // primary → standby: WAL, stalled by Pause
	}
}

// relay copies src to dst until either side closes.
func (l *replLink) relay(dst, src net.Conn, stallable bool) {
	defer func() { _, _ = dst.Close(), src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if stallable && !l.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed link: either way the relay ends
			return
		}
	}
}

// pass waits while the link is paused; false once it is closed.
func (l *replLink) pass() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.paused && !l.closed {
		l.cond.Wait()
	}
	return !l.closed
}

// Pause stalls the primary → standby direction.
func (l *replLink) Pause() {
	l.mu.Lock()
	l.paused = true
	l.mu.Unlock()
}

// Close drops the link and whatever it held.
func (l *replLink) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	conns := l.conns
	l.cond.Broadcast()
	l.mu.Unlock()
	_ = l.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}
