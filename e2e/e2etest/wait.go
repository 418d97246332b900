package e2etest

import (
	"testing"
	"time"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/pg"
)

// The waiting helpers live in the lab, where experiments use them; the e2e
// packages reach them here under their familiar names.

// DefaultWait bounds every wait for an observable state.
const DefaultWait = lab.DefaultWait

// Errors collects failures from goroutines for the test goroutine.
type Errors = lab.Errors

// Async is work on its own goroutine whose outcome the test checks.
type Async[T any] = lab.Async[T]

// NewErrors holds up to capacity errors.
func NewErrors(capacity int) *Errors { return lab.NewErrors(capacity) }

// Go runs fn on a new goroutine.
func Go[T any](fn func() (T, error)) *Async[T] { return lab.Go(fn) }

// WaitOrTimeout receives from ch, failing the test after DefaultWait.
func WaitOrTimeout[T any](t testing.TB, ch <-chan T, what ...any) T {
	t.Helper()
	return lab.WaitOrTimeout(t, ch, what...)
}

// WaitFor polls cond until it holds, failing the test after limit
// (DefaultWait when 0).
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	lab.WaitFor(t, limit, what, cond)
}

// WaitForLockWaiters returns once n backends wait on a lock running fragment.
func WaitForLockWaiters(t testing.TB, db pg.Querier, fragment string, n int) {
	t.Helper()
	lab.WaitForLockWaiters(t, db, fragment, n)
}
