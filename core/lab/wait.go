package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// DefaultWait bounds every wait for an observable state (a child's line, a
// channel, a lock waiter). It is generous because the machine is shared:
// reaching it is a failure, never a timing boundary an experiment relies on.
const DefaultWait = 60 * time.Second

// WaitOrTimeout receives from ch, failing the test after DefaultWait with
// what (a fmt format and its arguments) saying what never happened.
func WaitOrTimeout[V any](t T, ch <-chan V, what ...any) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(DefaultWait):
		msg := "nothing arrived"
		if len(what) > 0 {
			msg = fmt.Sprintf(fmt.Sprint(what[0]), what[1:]...)
		}
		t.Fatalf("%s within %s", msg, DefaultWait)
		var zero V
		return zero
	}
}

// WaitFor polls cond until it holds, failing t after limit (DefaultWait
// when 0) with what saying what never happened: the one way an experiment
// waits for a state another actor reaches (a backend waiting on a lock, a
// gauge dropping), never a sleep standing in for it. cond runs on the
// calling goroutine, so it may assert.
func WaitFor(t T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if limit <= 0 {
		limit = DefaultWait
	}
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("lab: gave up after %v waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Millisecond) // polling an observable state, not standing in for it
	}
}

// WaitForLockWaiters returns once at least n backends of db's database
// wait on a lock while running a statement containing fragment ("" for
// any): the observable state "the racing operation is queued behind the
// one that holds the row", never a guessed duration.
func WaitForLockWaiters(t T, db pg.Querier, fragment string, n int) {
	t.Helper()
	WaitFor(t, DefaultWait, fmt.Sprintf("%d statement(s) %q to wait on a lock", n, fragment), func() bool {
		var waiting int
		if err := db.QueryRow(context.Background(), `
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock' AND position($1 in query) > 0`, fragment).Scan(&waiting); err != nil {
			t.Fatalf("lab: count lock waiters: %v", err)
		}
		return waiting >= n
	})
}

// Errors collects failures from goroutines so that the assertions run on
// the test goroutine (require in a goroutine cannot stop the test; it
// hangs it). Add from any goroutine; Check after they are done.
type Errors struct {
	ch chan error
}

// NewErrors holds up to capacity errors (one per goroutine is enough).
func NewErrors(capacity int) *Errors { return &Errors{ch: make(chan error, capacity)} }

// Add records err if it is not nil.
func (e *Errors) Add(err error) {
	if err != nil {
		e.ch <- err
	}
}

// Check fails the test with every recorded error.
func (e *Errors) Check(t T) {
	t.Helper()
	for {
		select {
		case err := <-e.ch:
			t.Errorf("goroutine: %v", err)
		default:
			if t.Failed() {
				t.FailNow()
			}
			return
		}
	}
}

// Async is work running on its own goroutine whose outcome the test
// goroutine checks: the goroutine never calls require (FailNow there would
// end the goroutine, not the test, and leave the test waiting).
type Async[V any] struct {
	ch chan asyncResult[V]
}

type asyncResult[V any] struct {
	v   V
	err error
}

// Go runs fn on a new goroutine.
func Go[V any](fn func() (V, error)) *Async[V] {
	a := &Async[V]{ch: make(chan asyncResult[V], 1)}
	go func() {
		v, err := fn()
		a.ch <- asyncResult[V]{v, err}
	}()
	return a
}

// Wait waits (up to DefaultWait) for fn and fails the test, on the test
// goroutine, if it returned an error.
func (a *Async[V]) Wait(t T) V {
	t.Helper()
	r := WaitOrTimeout(t, a.ch, "the goroutine did not finish")
	if r.err != nil {
		t.Fatalf("goroutine: %v", r.err)
	}
	return r.v
}

// Result waits (up to DefaultWait) for fn and returns its value and error
// for the test to judge (an experiment that expects a failure).
func (a *Async[V]) Result(t T) (V, error) {
	t.Helper()
	r := WaitOrTimeout(t, a.ch, "the goroutine did not finish")
	return r.v, r.err
}

// Go sends r on its own goroutine (a request that races another, or waits
// at a fault point); Wait on the result fails the test on a transport error.
func (a *App) Go(r Req) *Async[Response] {
	return Go(func() (Response, error) { return a.Send(context.Background(), r) })
}

// AtOnce runs fn(0) … fn(n-1) on n goroutines released together: every
// goroutine is started and parked at one gate, the gate opens once all of
// them are parked, and AtOnce returns when every fn has returned. It is the
// one start line of the experiments whose claim is about actors arriving
// at the same moment ("released together", "at once"): no actor gets a
// head start from being launched first. Whether their statements really
// overlapped at the database is for Experiment.Overlap to check, not for
// the gate. fn runs on its own goroutine: it records what it saw (a slice
// slot, lab.Errors) for the caller to judge; a FailNow inside it ends that
// goroutine only, and AtOnce still returns.
func AtOnce(n int, fn func(i int)) {
	gate := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			fn(i)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
}
