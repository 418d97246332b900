package e2etest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
)

// DefaultWait bounds every wait for an observable state (a child's line, a
// channel, a lock waiter). It is generous because the machine is shared:
// reaching it is a failure, never a timing boundary an experiment relies on.
const DefaultWait = 60 * time.Second

// WaitOrTimeout receives from ch, failing the test after DefaultWait with
// what (a fmt format and its arguments) saying what never happened.
func WaitOrTimeout[T any](t testing.TB, ch <-chan T, what ...any) T {
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
		var zero T
		return zero
	}
}

// WaitForLockWaiters returns once at least n backends of db's database
// wait on a lock while running a statement containing fragment ("" for
// any): the observable state "the racing operation is queued behind the
// one that holds the row", never a guessed duration.
func WaitForLockWaiters(t testing.TB, db pg.Querier, fragment string, n int) {
	t.Helper()
	deadline := time.Now().Add(DefaultWait)
	for {
		var waiting int
		err := db.QueryRow(context.Background(), `
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock' AND position($1 in query) > 0`, fragment).Scan(&waiting)
		require.NoError(t, err)
		if waiting >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "no statement %q came to wait on a lock within %s", fragment, DefaultWait)
		time.Sleep(2 * time.Millisecond) // polling an observable state, not standing in for it
	}
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
func (e *Errors) Check(t testing.TB) {
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
