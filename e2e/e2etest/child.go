package e2etest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Child is one `fencelab` OS process under test: its stdout as lines on a
// channel, its stderr captured (safe to read while it runs), its stdin held
// open for start gates and --pause-at. Every process-level experiment
// starts its children with StartChild.
type Child struct {
	Name string
	Cmd  *exec.Cmd
	// Lines are the child's stdout lines; closed when stdout closes.
	Lines <-chan string

	stdin  io.WriteCloser
	stderr LockedBuffer
	done   chan struct{}
	err    error // the exit status, valid once done is closed
}

// LockedBuffer is a child's output (a Child's stderr, for one): exec's
// copier writes it while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartChild starts the fencelab binary (Binary) with args and env. At
// cleanup the child is killed if still running and, when the test failed,
// its stderr is logged.
func StartChild(t testing.TB, name string, env []string, args ...string) *Child {
	t.Helper()
	return StartChildIn(t, name, "", env, args...)
}

// StartChildIn is StartChild in the working directory dir ("" for the
// test's).
func StartChildIn(t testing.TB, name, dir string, env []string, args ...string) *Child {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Env, cmd.Dir = env, dir
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	lines := make(chan string, 256)
	c := &Child{Name: name, Cmd: cmd, Lines: lines, stdin: stdin, done: make(chan struct{})}
	cmd.Stderr = &c.stderr
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		c.err = cmd.Wait() // after the last read, as os/exec requires
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill() // only this test's own child
			go func() {            // unread lines must not keep the reader from Wait
				for range lines {
				}
			}()
			<-c.done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, c.Stderr())
		}
	})
	return c
}

// Stderr is what the child has written to stderr so far.
func (c *Child) Stderr() string { return c.stderr.String() }

// Done is closed once the child has exited and its stdout is read.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is the child's exit status; valid once Done is closed.
func (c *Child) Err() error { return c.err }

// Pid is the child's process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Line waits for the child's next stdout line.
func (c *Child) Line(t testing.TB, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-c.Lines:
		require.True(t, ok, "%s exited: %v; stderr:\n%s", c.Name, c.Err(), c.Stderr())
		return l
	case <-time.After(within):
		t.Fatalf("%s printed nothing within %s; stderr:\n%s", c.Name, within, c.Stderr())
		return ""
	}
}

// Expect waits (up to DefaultWait) for the next stdout line and requires
// it to start with prefix; it returns the line.
func (c *Child) Expect(t testing.TB, prefix string) string {
	t.Helper()
	line := c.Line(t, DefaultWait)
	require.True(t, strings.HasPrefix(line, prefix), "%s printed %q, want %q", c.Name, line, prefix)
	return line
}

// SkipTo waits (up to DefaultWait) for a stdout line equal to want
// (surrounding space aside), skipping others.
func (c *Child) SkipTo(t testing.TB, want string) {
	t.Helper()
	c.SkipToMatch(t, regexp.MustCompile(`^\s*`+regexp.QuoteMeta(want)+`\s*$`), DefaultWait)
}

// SkipToMatch waits up to within for a stdout line matching re, skipping
// others, and returns its submatches.
func (c *Child) SkipToMatch(t testing.TB, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line, ok := <-c.Lines:
			require.True(t, ok, "%s closed stdout before printing a line matching %s: %v; stderr:\n%s", c.Name, re, c.Err(), c.Stderr())
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-deadline:
			t.Fatalf("%s printed no line matching %s within %s; stderr:\n%s", c.Name, re, within, c.Stderr())
			return nil
		}
	}
}

// WaitStderr waits (up to DefaultWait) until the child has logged want.
func (c *Child) WaitStderr(t testing.TB, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(c.Stderr(), want) }, DefaultWait, 10*time.Millisecond,
		"%s never logged %q", c.Name, want)
}

// Send writes one line to the child's stdin: it opens a start gate or
// releases a --pause-at pause.
func (c *Child) Send(t testing.TB) {
	t.Helper()
	_, err := io.WriteString(c.stdin, "\n")
	require.NoError(t, err)
}

// Wait waits up to d for the child to exit and returns its exit status.
func (c *Child) Wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s; stderr:\n%s", c.Name, d, c.Stderr())
		return nil
	}
}

// Interrupt sends SIGINT (Ctrl-C), then waits up to d for the child to
// exit, discarding the rest of its stdout, and returns its exit status.
func (c *Child) Interrupt(t testing.TB, d time.Duration) error {
	t.Helper()
	require.NoError(t, c.Cmd.Process.Signal(os.Interrupt))
	go func() {
		for range c.Lines {
		}
	}()
	return c.Wait(t, d)
}

// Kill9 kills the child with SIGKILL and waits until it is gone.
func (c *Child) Kill9(t testing.TB) {
	t.Helper()
	require.NoError(t, c.Cmd.Process.Kill())
	go func() {
		for range c.Lines {
		}
	}()
	<-c.done
}

// ScratchDir is a fresh 0755 directory (prefix names it), removed when the
// test ends: a child that provisions its own cluster inside it needs the
// postgres OS user to reach it when the test runs as root.
func ScratchDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// ReadEnvFile reads an env file a child writes — `fencelab dev`'s DATA/env,
// deploy/local/up.sh's DIR/env — as KEY=VALUE lines (# comments skipped).
// A value single-quoted for sh, as up.sh writes every one, is unquoted (a
// quote inside it closes the quoting, is escaped and reopens it).
func ReadEnvFile(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
				v = strings.ReplaceAll(v[1:len(v)-1], `'\''`, "'")
			}
			env[k] = v
		}
	}
	require.NoError(t, sc.Err())
	return env
}
