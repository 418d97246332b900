package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"
)

// Lines hands out the lines of a reader (the worker's stdin) one at a time
// to whoever waits first: the start gate, then each pause.
type Lines struct{ ch chan string }

// NewLines starts reading r in the background.
func NewLines(r io.Reader) *Lines {
	l := &Lines{ch: make(chan string)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.ch <- sc.Text()
		}
		close(l.ch)
	}()
	return l
}

// Wait blocks until a line arrives, the reader ends (io.EOF) or ctx ends.
func (l *Lines) Wait(ctx context.Context) error {
	select {
	case _, ok := <-l.ch:
		if !ok {
			return io.EOF
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PauseOnLines arms name so that its first hit prints "PAUSED <name> <key>"
// on out and blocks until a line arrives. This is `--pause-at NAME`: the
// parent test sees where the process stopped, does what its timeline needs,
// then writes a newline to release it.
func (s *Set) PauseOnLines(name string, lines *Lines, out io.Writer) {
	var once sync.Once
	var mu sync.Mutex
	s.ArmFunc(name, func(ctx context.Context, key string) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		mu.Lock()
		fmt.Fprintf(out, "PAUSED %s %s\n", name, key)
		mu.Unlock()
		if err := lines.Wait(ctx); err != nil && err != io.EOF {
			return err
		}
		return nil
	})
}
