package faults_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/faults"
)

func TestNilSetIsANoOp(t *testing.T) {
	t.Parallel()
	var s *faults.Set
	require.NoError(t, s.Hit(context.Background(), faults.AfterClaim, "job-1"))
}

func TestPauseHoldsTheMatchingHitUntilReleased(t *testing.T) {
	t.Parallel()
	s := faults.New()
	g := s.Pause(faults.AfterClaim, "job-2")
	require.NoError(t, s.Hit(context.Background(), faults.AfterClaim, "job-1"), "other keys pass")

	done := make(chan error, 1)
	go func() { done <- s.Hit(context.Background(), faults.AfterClaim, "job-2") }()
	<-g.Reached()
	require.Equal(t, "job-2", g.Key())
	select {
	case <-done:
		t.Fatal("hit returned before release")
	default:
	}
	g.Release()
	require.NoError(t, <-done)
	require.NoError(t, s.Hit(context.Background(), faults.AfterClaim, "job-2"), "the gate is used up")
}

func TestPausedHitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	s := faults.New()
	g := s.Pause(faults.BeforeCommit, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Hit(ctx, faults.BeforeCommit, "x") }()
	<-g.Reached()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestFailInjectsAnError(t *testing.T) {
	t.Parallel()
	s := faults.New()
	s.Fail(faults.BeforeCommit, "k1")
	require.ErrorIs(t, s.Hit(context.Background(), faults.BeforeCommit, "k1"), faults.ErrInjected)
	require.NoError(t, s.Hit(context.Background(), faults.BeforeCommit, "k2"))
	s.Disarm(faults.BeforeCommit)
	require.NoError(t, s.Hit(context.Background(), faults.BeforeCommit, "k1"))
}

func TestPauseOnLinesWaitsForALine(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	var out strings.Builder
	s := faults.New()
	s.PauseOnLines(faults.AfterClaim, faults.NewLines(pr), &syncWriter{b: &out})
	done := make(chan error, 1)
	go func() { done <- s.Hit(context.Background(), faults.AfterClaim, "7") }()
	select {
	case <-done:
		t.Fatal("returned without a line")
	case <-time.After(50 * time.Millisecond):
	}
	_, _ = pw.Write([]byte("\n"))
	require.NoError(t, <-done)
	require.Contains(t, out.String(), "PAUSED after_claim 7")
}

type syncWriter struct{ b *strings.Builder }

func (w *syncWriter) Write(p []byte) (int, error) { return w.b.Write(p) }
