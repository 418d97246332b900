package cluster_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/fakeprovider"
)

// Each experiment owns its cluster on its own ports (19200, 19300, 19400 +
// up to 42), so the three run in parallel.

// startFailover is both failover experiments' opening, the mode (sync or
// async replication) their one difference: a parallel test, the fake tool
// on basePort+50, the topology on basePort, the client load running and
// 40 acknowledgements in, and old the primary about to be crashed.
func startFailover(t *testing.T, mode string, basePort int) (tool *fakeprovider.Server, c *cluster, ld *load, old string) {
	t.Helper()
	t.Parallel()
	tool, toolEnv := startTool(t, basePort+50)
	c = startCluster(t, mode, basePort, toolEnv)
	ld = startLoad(t, c, spec{debitors: 3, buyers: 2, starters: 1, holders: 2})
	ld.waitAcks(t, 40)
	old = c.primary()
	require.NotEmpty(t, old)
	return tool, c, ld, old
}

// The chapter's claim, the production way: with synchronous replication
// the standby has flushed every acknowledged commit before the client
// heard "committed", so when Patroni promotes it after the primary's
// crash, nothing acknowledged is missing and no fence goes backwards.
func TestFailoverWithSyncStandbyKeepsEveryAcknowledgedWrite(t *testing.T) {
	tool, c, ld, old := startFailover(t, "sync", 19200)
	t0, newPrimary, promoted, log := crashPrimary(t, c, ld, old)

	unavailable, inFlight, fails := log.windows(t0)
	t.Logf("RESULT failover-sync promoted=node%s promotion=%s unavailable=%s in_flight_409=%s failed_attempts=%d acked=%d grants=%d (%s)",
		newPrimary, promoted.Round(10*time.Millisecond), unavailable.Round(10*time.Millisecond), inFlight.Round(10*time.Millisecond),
		fails, len(log.acks), len(log.grants), log.causes())
	t.Logf("  acknowledged: %s", byKind(log.acks))
	require.Positive(t, fails, "the failover must have been seen by the clients, or the experiment proves nothing")

	j := join(t, c, log)
	require.Empty(t, j.missing, "every acknowledged debit and hold is in its table")
	require.Empty(t, j.doubled, "and exactly once")
	require.Empty(t, j.moved, "as the transaction the client was told about")
	effectsMatchKeys(t, c, log)

	before, again := log.reissued(t0)
	require.Empty(t, again, "every fence granted after the failover exceeds %d, the largest granted before", before)
	waitWorkflows(t, c)
	jobs, orphans := workflowEffects(t, c, tool)
	require.Positive(t, jobs)
	require.Empty(t, orphans, "no tool effect without its workflow job")
	res, _ := porcupine.CheckOperationsVerbose(fenceModel, log.ops, time.Minute)
	require.Equal(t, porcupine.Ok, res, "the lease history of %d operations is linearizable", len(log.ops))

	assertInvariants(t, c, "points", "flashsale", "lease", "claim")
}

// The naive version: asynchronous replication, with the standby held
// behind at the moment of the crash (the primary's walsender is stopped, as
// a slow link or a busy standby would), so the primary acknowledges commits
// the standby never received. Patroni promotes it anyway — the lag is under
// maximum_lag_on_failover — and those commits are gone: the client log join
// finds acknowledged debits missing, and the lease's fence counter goes
// back, so fence numbers are handed out a second time. The tables' own
// invariants still hold: a lost suffix is a consistent state.
func TestFailoverWithAsyncStandbyCanLoseAcknowledgedWrites(t *testing.T) {
	tool, c, ld, old := startFailover(t, "async", 19300)
	standby := map[string]string{"0": "1", "1": "0"}[old]
	pdb, sdb := c.nodeDB(t, old), c.nodeDB(t, standby)
	ctx := context.Background()
	var walsender int
	require.NoError(t, pdb.QueryRow(ctx, `SELECT pid FROM pg_stat_replication`).Scan(&walsender))
	require.NoError(t, syscall.Kill(walsender, syscall.SIGSTOP))
	t.Logf("node%s: walsender %d stopped; the standby receives nothing from here on", old, walsender)
	ld.waitAcks(t, 40) // acknowledged by the primary alone

	var lag int64
	var standbyLSN string
	require.NoError(t, sdb.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn()::text`).Scan(&standbyLSN))
	require.NoError(t, pdb.QueryRow(ctx, `SELECT pg_current_wal_lsn() - $1::pg_lsn`, standbyLSN).Scan(&lag))
	require.Positive(t, lag, "the standby must be behind when the primary dies")

	t0, newPrimary, promoted, log := crashPrimary(t, c, ld, old)

	unavailable, inFlight, fails := log.windows(t0)
	j := join(t, c, log)
	before, again := log.reissued(t0)
	t.Logf("RESULT failover-async promoted=node%s lag_bytes=%d promotion=%s unavailable=%s in_flight_409=%s failed_attempts=%d acked=%d lost=%d (%s) reissued_fences=%d (%s)",
		newPrimary, lag, promoted.Round(10*time.Millisecond), unavailable.Round(10*time.Millisecond), inFlight.Round(10*time.Millisecond),
		fails, len(log.acks), len(j.missing), byKind(j.missing), len(again), log.causes())
	for i, a := range j.missing {
		if i == 5 {
			t.Logf("  … %d more", len(j.missing)-5)
			break
		}
		t.Logf("  lost: %s's %s %s, acknowledged as %d at +%s", a.client, a.kind, a.key, a.id, a.at.Sub(log.start).Round(time.Millisecond))
	}
	require.NotEmpty(t, j.missing, "acknowledged writes the promoted standby never received are lost")
	require.Empty(t, j.doubled, "none is applied twice")
	require.NotEmpty(t, again, "a fence at or below %d, the largest granted before the crash, is granted again", before)
	waitWorkflows(t, c)
	jobs, orphans := workflowEffects(t, c, tool)
	t.Logf("  workflows: %d jobs, each one effect; %d tool effects whose job the promoted standby never had", jobs, len(orphans))
	t.Logf("  reissued fences (largest before the crash %d): %v", before, again)
	res := porcupine.CheckOperations(fenceModel, log.ops)
	require.False(t, res, "the lease history check rejects the reissued fence")

	assertInvariants(t, c, "points", "flashsale", "lease", "claim")
}

// A serve replica dies mid-load (SIGKILL to its process group). HAProxy
// stops routing to it after its health checks fail; clients whose request
// died with it retry with the same Idempotency-Key, land on another
// replica, and get one effect each.
//
// The same topology then shows the other half of a replica's death
// (aKilledReplicaComesBack): serve0's process alone is killed, and its
// supervisor starts it again. One cluster serves both: a topology is the
// most expensive thing the suite starts, and neither half touches the
// database's roles.
func TestKilledReplicaRetriesLandOnce(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "sync", 19400)
	t.Run("the env file is sh-quoted and check works after sourcing it", func(t *testing.T) {
		envFileSourcesWhole(t, c)
	})
	t.Run("chunks of one upload on three replicas make one blob", func(t *testing.T) {
		chunksOnEveryReplicaMakeOneBlob(t, c)
	})
	killedReplicaRetriesLandOnce(t, c)
	if t.Failed() {
		return
	}
	// serve1's whole process group (its supervisor with it) is gone for
	// good: the restart is serve0's, and down.sh stops the others.
	t.Run("a killed replica comes back", func(t *testing.T) {
		aKilledReplicaComesBack(t, c, []string{"serve0", "serve2", "worker0", "worker1"})
	})
}

func killedReplicaRetriesLandOnce(t *testing.T, c *cluster) {
	ld := startLoad(t, c, spec{debitors: 4, buyers: 2})
	ld.waitAcks(t, 60)

	g := c.group(t, "serve1")
	t0 := time.Now()
	require.NoError(t, syscall.Kill(-g, syscall.SIGKILL))
	ld.waitAcks(t, 60)
	log := ld.finish(t)

	unavailable, inFlight, fails := log.windows(t0)
	t.Logf("RESULT replica-loss unavailable=%s in_flight_409=%s failed_attempts=%d acked=%d (%s)",
		unavailable.Round(10*time.Millisecond), inFlight.Round(10*time.Millisecond), fails, len(log.acks), log.causes())

	j := join(t, c, log)
	require.Empty(t, j.missing, "every acknowledged debit and hold is in its table")
	require.Empty(t, j.doubled, "and exactly once, whichever replica the retry reached")
	require.Empty(t, j.moved)
	effectsMatchKeys(t, c, log)
	assertInvariants(t, c, "points", "flashsale", "upload")
}

// byKind counts acknowledgements per kind ("debit=3 hold=1").
func byKind(acks []ack) string {
	n := map[string]int{}
	for _, a := range acks {
		n[a.kind]++
	}
	return fmt.Sprintf("debit=%d hold=%d workflow=%d", n["debit"], n["hold"], n["workflow"])
}

// waitPromotion waits for Patroni to promote the node that is not old.
// crashPrimary is both failover experiments' crash: the primary old is
// killed under the load, Patroni promotes the standby (newPrimary, after
// promoted), 40 more acknowledgements come in and the load ends with its
// log. t0 is the moment of the crash.
func crashPrimary(t *testing.T, c *cluster, ld *load, old string) (t0 time.Time, newPrimary string, promoted time.Duration, log *clientLog) {
	t.Helper()
	t0 = time.Now()
	c.crashNode(t, old)
	newPrimary = waitPromotion(t, c, old)
	promoted = time.Since(t0)
	ld.waitAcks(t, 40)
	return t0, newPrimary, promoted, ld.finish(t)
}

func waitPromotion(t *testing.T, c *cluster, old string) string {
	t.Helper()
	want := map[string]string{"0": "1", "1": "0"}[old]
	require.Eventually(t, func() bool { return c.primary() == want }, 45*time.Second, 50*time.Millisecond,
		"Patroni must promote node%s after node%s's crash", want, old)
	return want
}
