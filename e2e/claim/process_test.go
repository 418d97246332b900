package claim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/workflow"
)

func startWorker(t *testing.T, name string, env []string, args ...string) *e2etest.Child {
	t.Helper()
	return e2etest.StartChild(t, name, env, append([]string{"worker"}, args...)...)
}

// The book's 14.2: two separate `fencelab worker` processes, one start gate,
// one workflow. The winner pauses right after its claim committed, the loser
// finds nothing and exits, the test reads the owner from the database, then
// releases the winner, which calls the tool and commits. The result line is
// computed from the event table, the tool's POST count and ledger, and the
// job row.
func TestTwoWorkerProcessesClaimExactlyOne(t *testing.T) {
	t.Parallel()
	l := newLab(t, bookTool)
	ctx := context.Background()
	const key = "wf-0001"
	id := l.enqueue(t, claim.NewClient(l.pool, claim.Options{}), claim.NewJob{Kind: workflow.KindName, BusinessKey: key})

	env := e2etest.ChildEnv(l.url, workflow.EnvToolURL+"="+l.tool.URL(), "FENCELAB_WORKERS=2")
	// Only the workflow kind: other modules' periodic jobs are not part of
	// this experiment.
	args := []string{"--start-gate", "--pause-at", "after_claim", "--exit-when-idle", "--kinds", workflow.KindName}
	workers := []*e2etest.Child{startWorker(t, "worker-1", env, args...), startWorker(t, "worker-2", env, args...)}
	ready := map[int]bool{} // distinct OS processes at the gate
	for _, w := range workers {
		w.Expect(t, "READY")
		ready[w.Pid()] = true
	}
	for _, w := range workers { // open the gate for both
		w.Send(t)
	}

	// Exactly one pauses after its claim; the other's claim is empty and it exits.
	var winner, loser *e2etest.Child
	deadline := time.After(60 * time.Second)
	// A closed stdout is the loser exiting (possibly before the winner
	// prints); a nil channel drops out of the select.
	out0, out1 := workers[0].Lines, workers[1].Lines
	for winner == nil {
		select {
		case line, ok := <-out0:
			if !ok {
				out0 = nil
				continue
			}
			require.Equal(t, fmt.Sprintf("PAUSED after_claim %d", id), line)
			winner, loser = workers[0], workers[1]
		case line, ok := <-out1:
			if !ok {
				out1 = nil
				continue
			}
			require.Equal(t, fmt.Sprintf("PAUSED after_claim %d", id), line)
			winner, loser = workers[1], workers[0]
		case <-deadline:
			t.Fatalf("no worker paused after its claim; stderr:\n%s\n%s", workers[0].Stderr(), workers[1].Stderr())
		}
	}
	require.NoError(t, loser.Wait(t, e2etest.DefaultWait), "the loser exits cleanly after its empty claim")

	row := l.job(t, id)
	require.Equal(t, claim.StateRunning, row.State)
	require.Contains(t, row.Owner, "/"+strconv.Itoa(winner.Pid())+"/", "the database names the paused process as owner")
	require.Zero(t, l.tool.Posts(), "the winner paused before calling the tool")

	winner.Send(t) // release the winner
	require.NoError(t, winner.Wait(t, e2etest.DefaultWait), "the winner finishes")

	var result struct {
		OSProcesses int    `json:"os_processes"`
		Claims      int    `json:"claims"`
		Effects     int    `json:"effects"`
		State       string `json:"state"`
	}
	result.OSProcesses = len(ready)
	result.Claims = l.count(t, `SELECT count(*) FROM job_event WHERE job_id = $1 AND event = 'claimed'`, id)
	effects := l.tool.EffectsFor(workflow.IdempotencyKey(key))
	require.Equal(t, len(effects), l.tool.Posts(), "every POST made an effect: no retry hid a second call")
	result.Effects = len(effects)
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT state FROM job WHERE id = $1`, id).Scan(&result.State))
	line, err := json.Marshal(result)
	require.NoError(t, err)
	fmt.Println(string(line))
	require.Equal(t, `{"os_processes":2,"claims":1,"effects":1,"state":"succeeded"}`, string(line))
	e2etest.Assert(t, l.pool, "claim")
}
