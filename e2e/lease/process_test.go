package lease_test

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/report"
)

// The chapter's timeline with real OS processes: two `fencelab worker`
// processes run the daily-report job for one date. Worker A takes the
// lease and stalls at before_write (--pause-at); B is refused while A's
// lease is live; A's lease is expired with SQL; B takes over and writes;
// A is released, and its write is refused by the resource. Both exit
// cleanly on SIGTERM, and the report row holds B's content.
func TestReportJobAcrossTwoProcesses(t *testing.T) {
	t.Parallel()
	a := e2etest.Start(t, e2etest.Options{})
	bin := e2etest.Binary(t)
	name := report.LeaseName(day)
	reader := instance(t, a, "reader", nil)
	env := func(holder, level string) []string {
		return e2etest.ChildEnv(a.DBURL,
			"FENCELAB_REPORT_HOLDER="+holder,
			"FENCELAB_REPORT_DATE="+day.Format(report.DateLayout),
			"FENCELAB_REPORT_INTERVAL=50ms",
			"FENCELAB_REPORT_TTL=1h", // only the test's SQL ends A's lease
			"FENCELAB_LOG_LEVEL="+level)
	}

	workerA := startWorker(t, bin, env("worker-a", "warn"), "--pause-at", faults.BeforeWrite)
	workerA.waitStdout(t, "PAUSED "+faults.BeforeWrite+" "+name)
	grants := grantsOf(t, a.Pool, name)
	require.Len(t, grants, 1)
	require.Equal(t, "worker-a", grants[0].Holder)
	fenceA := grants[0].Fence

	workerB := startWorker(t, bin, env("worker-b", "debug"))
	workerB.waitStderr(t, "report lease held by another instance")
	_, err := reader.Get(ctx, day)
	require.ErrorIs(t, err, report.ErrNoReport, "nobody has written while A holds the lease")

	forceExpiry(t, a.Pool, name, fenceA)
	var got report.Report
	require.Eventually(t, func() bool {
		got, err = reader.Get(ctx, day)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "B takes over and writes")
	require.Equal(t, "worker-b", got.WrittenBy)
	require.Greater(t, got.Fence, fenceA)
	fenceB := got.Fence

	workerA.release(t)
	workerA.waitStderr(t, "report write refused: stale fence")
	require.Contains(t, workerA.stderr(), "fence "+strconv.FormatInt(fenceA, 10)+" is older", "A's own fence was the one refused")

	for _, w := range []*worker{workerA, workerB} {
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, w := range []*worker{workerA, workerB} {
		require.NoError(t, w.wait(t, 30*time.Second), "%s must exit cleanly on SIGTERM; stderr:\n%s", w.name, w.stderr())
	}

	final, err := reader.Get(ctx, day)
	require.NoError(t, err)
	require.Equal(t, got, final, "the report row still holds the live holder's content")
	require.Contains(t, final.Content, "worker-b")
	require.Equal(t, []write{{"worker-b", fenceB}}, writesOf(t, a.Pool, day))
	require.Equal(t, []grant{{"worker-a", fenceA}, {"worker-b", fenceB}}, grantsOf(t, a.Pool, name))
	e2etest.Assert(t, a.Pool, "lease", "report")
}

// worker is a running `fencelab worker` child process.
type worker struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	mu     sync.Mutex
	errBuf bytes.Buffer
	done   chan error
}

func startWorker(t *testing.T, bin string, env []string, args ...string) *worker {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"worker"}, args...)...)
	cmd.Env = env
	w := &worker{name: strings.Join(cmd.Args, " "), cmd: cmd, lines: make(chan string, 64), done: make(chan error, 1)}
	var err error
	w.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = lockedWriter{&w.mu, &w.errBuf}
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	go func() { w.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = w.stdin.Close()
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Kill() // only this test's own child
			<-w.done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", w.name, w.stderr())
		}
	})
	return w
}

func (w *worker) waitStdout(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				t.Fatalf("%s closed stdout before printing %q; stderr:\n%s", w.name, want, w.stderr())
			}
			if strings.TrimSpace(line) == want {
				return
			}
		case <-deadline:
			t.Fatalf("%s did not print %q; stderr:\n%s", w.name, want, w.stderr())
		}
	}
}

func (w *worker) waitStderr(t *testing.T, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(w.stderr(), want) }, 60*time.Second, 10*time.Millisecond,
		"%s never logged %q", w.name, want)
}

// release lets a worker paused by --pause-at continue.
func (w *worker) release(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(w.stdin, "\n")
	require.NoError(t, err)
}

func (w *worker) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // keep it for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", w.name, d)
		return nil
	}
}

func (w *worker) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errBuf.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
