package setup

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Serve is a `fencelab serve` child process, for a bench that measures
// the real binary from outside, as a client or an operator does (its
// memory and CPU are then the server's alone, not the load generator's).
type Serve struct {
	Cmd    *exec.Cmd
	Base   string // http://ADDR
	Stderr *bytes.Buffer
}

// LoopbackAddr is a loopback address that was free a moment ago, for a
// child to listen on.
func LoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}

// StartServe starts cmd, a `fencelab serve` told (by flag or environment)
// to listen on addr, and waits up to a minute for its /readyz to answer
// 200, asking with client every poll. Its stderr is kept for the error.
func StartServe(cmd *exec.Cmd, addr string, client *http.Client, poll time.Duration) (*Serve, error) {
	s := &Serve{Cmd: cmd, Base: "http://" + addr, Stderr: &bytes.Buffer{}}
	cmd.Stderr = s.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(s.Base + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("serve did not become ready: %v\n%s", err, s.Stderr.String())
		}
		time.Sleep(poll)
	}
}

// Stop interrupts the child (a clean shutdown) and kills it if it has not
// exited 15 s later.
func (s *Serve) Stop() {
	_ = s.Cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-done
	}
}

// StatusKB reads a field of the child's /proc/PID/status in kB (VmRSS,
// VmHWM: the kernel's own figures; Linux only).
func (s *Serve) StatusKB(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, s.Cmd.Process.Pid)
}
