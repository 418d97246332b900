package claim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/workflow"
)

// child is one `fencelab worker` OS process.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan error
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startWorker(t *testing.T, name string, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(e2etest.Binary(t), append([]string{"worker"}, args...)...)
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	c := &child{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan error, 1), stderr: &syncBuffer{}}
	cmd.Stderr = c.stderr
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, c.stderr.String())
		}
	})
	return c
}

// expect waits for a stdout line starting with prefix.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(t, ok, "%s exited before printing %q; stderr:\n%s", c.name, prefix, c.stderr.String())
		require.True(t, strings.HasPrefix(line, prefix), "%s printed %q, want %q", c.name, line, prefix)
		return line
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not print %q; stderr:\n%s", c.name, prefix, c.stderr.String())
	}
	return ""
}

func (c *child) send(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(c.stdin, "\n")
	require.NoError(t, err)
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
	workers := []*child{startWorker(t, "worker-1", env, args...), startWorker(t, "worker-2", env, args...)}
	ready := map[int]bool{} // distinct OS processes at the gate
	for _, w := range workers {
		w.expect(t, "READY")
		ready[w.cmd.Process.Pid] = true
	}
	for _, w := range workers { // open the gate for both
		w.send(t)
	}

	// Exactly one pauses after its claim; the other's claim is empty and it exits.
	var winner, loser *child
	deadline := time.After(60 * time.Second)
	// A closed stdout is the loser exiting (possibly before the winner
	// prints); a nil channel drops out of the select.
	out0, out1 := workers[0].lines, workers[1].lines
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
			t.Fatalf("no worker paused after its claim; stderr:\n%s\n%s", workers[0].stderr.String(), workers[1].stderr.String())
		}
	}
	select {
	case err := <-loser.exited:
		require.NoError(t, err, "the loser exits cleanly after its empty claim")
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit after an empty claim", loser.name)
	}

	row := l.job(t, id)
	require.Equal(t, claim.StateRunning, row.State)
	require.Contains(t, row.Owner, "/"+strconv.Itoa(winner.cmd.Process.Pid)+"/", "the database names the paused process as owner")
	require.Zero(t, l.tool.Posts(), "the winner paused before calling the tool")

	winner.send(t) // release the winner
	select {
	case err := <-winner.exited:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not finish", winner.name)
	}

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
