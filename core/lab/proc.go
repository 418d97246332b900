package lab

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a fencelab child process of an experiment (`fencelab worker …`):
// its stdout lines arrive on Lines, its stderr is kept, and a newline on
// its stdin releases a --start-gate or --pause-at stop.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Lines carries stdout line by line; it is closed when stdout closes
	// (the process exited).
	Lines  <-chan string
	stdin  io.WriteCloser
	exited chan error
	mu     sync.Mutex
	errBuf bytes.Buffer
}

// ProcWait bounds every wait on a child: far above any healthy run, so a
// child that hangs fails the experiment with its stderr instead of hanging it.
const ProcWait = 60 * time.Second

// Spawn starts the fencelab binary with args (e.g. "worker", "--pause-at",
// "after_claim") and env (Env.ChildEnv). The child is killed when the
// experiment ends if it is still running; its stderr is logged if the
// experiment failed.
func (x *X) Spawn(name string, env []string, args ...string) *Proc {
	x.Helper()
	cmd := exec.Command(x.Env.Binary(x.T), args...)
	cmd.Env = env
	lines := make(chan string, 64)
	p := &Proc{Name: name, Cmd: cmd, Lines: lines, exited: make(chan error, 1)}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		x.Fatalf("lab: %s: %v", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		x.Fatalf("lab: %s: %v", name, err)
	}
	cmd.Stderr = procWriter{p}
	if err := cmd.Start(); err != nil {
		x.Fatalf("lab: start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.exited <- cmd.Wait()
	}()
	x.Cleanup(func() {
		_ = p.stdin.Close()
		_ = cmd.Process.Kill() // only this experiment's own child; a no-op once it exited
		go func() {
			for range lines { // unblock the reader so Wait can reap the child
			}
		}()
		select {
		case err := <-p.exited:
			p.exited <- err
		case <-time.After(10 * time.Second):
		}
		if x.Failed() {
			x.Logf("%s stderr:\n%s", name, p.Stderr())
		}
	})
	return p
}

type procWriter struct{ p *Proc }

func (w procWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.errBuf.Write(b)
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Stderr is what the child wrote to stderr so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errBuf.String()
}

// Expect waits for the next stdout line and requires it to start with prefix.
func (p *Proc) Expect(t T, prefix string) string {
	t.Helper()
	select {
	case line, ok := <-p.Lines:
		if !ok {
			t.Fatalf("%s exited before printing %q; stderr:\n%s", p.Name, prefix, p.Stderr())
		}
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("%s printed %q, want %q…", p.Name, line, prefix)
		}
		return line
	case <-time.After(ProcWait):
		t.Fatalf("%s did not print %q; stderr:\n%s", p.Name, prefix, p.Stderr())
	}
	return ""
}

// WaitStderr waits until the child's stderr contains want.
func (p *Proc) WaitStderr(t T, want string) {
	t.Helper()
	deadline := time.Now().Add(ProcWait)
	for !strings.Contains(p.Stderr(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %q; stderr:\n%s", p.Name, want, p.Stderr())
		}
		time.Sleep(10 * time.Millisecond) // polling a log, not standing in for a boundary
	}
}

// Release writes a newline to the child's stdin: it passes its start gate
// or resumes from its --pause-at stop.
func (p *Proc) Release(t T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "\n"); err != nil {
		t.Fatalf("lab: release %s: %v", p.Name, err)
	}
}

// Terminate sends SIGTERM (a graceful stop).
func (p *Proc) Terminate(t T) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("lab: SIGTERM %s: %v", p.Name, err)
	}
}

// Exited is the child's exit, once: the channel yields cmd.Wait's error.
func (p *Proc) Exited() <-chan error { return p.exited }

// Wait waits for the child to exit and returns cmd.Wait's error.
func (p *Proc) Wait(t T) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err // keep it for a second Wait
		return err
	case <-time.After(ProcWait):
		t.Fatalf("%s did not exit within %s; stderr:\n%s", p.Name, ProcWait, p.Stderr())
		return nil
	}
}
