package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Watchdog renews a lease in the background for a task that may outlive
// its TTL, and cancels the task's context the moment a renewal fails.
//
// It reduces mistaken expiry; it does not make the task safe. A process that
// stalls stalls its watchdog too, and a write already on the wire is not
// recalled by a cancelled context. Writes to protected resources still go
// through Guard.
type Watchdog struct {
	m        *Manager
	interval time.Duration
	cancel   context.CancelCauseFunc
	stop     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	lease    Lease
	err      error
	renewals int
}

// Watch starts a watchdog for l that renews it every l.TTL/3 (every > 0
// overrides the interval; it must be shorter than the TTL). The returned
// context is a child of ctx, cancelled with cause ErrLost (see
// context.Cause) as soon as a renewal fails; run the task under it and call
// Stop when the task ends.
//
// Any renewal failure counts as a loss, a database error included: a
// holder that cannot tell whether it still holds the lease must behave as
// if it does not. Each renewal may take until the moment the lease could
// have run out (its send time plus the TTL, by the local monotonic clock) and
// no longer, so a hanging database is noticed before the lease can lapse
// unnoticed, while a merely slow one does not cost a lease that still holds.
func (m *Manager) Watch(ctx context.Context, l Lease, every time.Duration) (context.Context, *Watchdog, error) {
	if err := validateLease(l); err != nil {
		return ctx, nil, err
	}
	if every == 0 {
		every = l.TTL / 3
	}
	if every <= 0 || every >= l.TTL {
		return ctx, nil, fmt.Errorf("%w: watchdog interval must be in (0, ttl %s), got %s", ErrInvalid, l.TTL, every)
	}
	taskCtx, cancel := context.WithCancelCause(ctx)
	w := &Watchdog{m: m, interval: every, cancel: cancel, lease: l,
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(taskCtx)
	return taskCtx, w, nil
}

func (w *Watchdog) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		l := w.lease
		w.mu.Unlock()
		deadline := l.heldUntil
		if deadline.IsZero() { // a Lease not made by Acquire: allow one interval
			deadline = time.Now().Add(w.interval)
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		renewed, err := w.m.Renew(rctx, l)
		cancel()
		select {
		case <-w.stop:
			return // stopped while renewing: the task is over, nothing was lost
		default:
		}
		if err != nil && ctx.Err() != nil {
			return // the task's context ended first: nothing was lost
		}
		w.mu.Lock()
		if err != nil {
			if !errors.Is(err, ErrLost) {
				err = fmt.Errorf("%w: cannot tell whether %s still holds: %w", ErrLost, l, err)
			}
			w.err = err
			w.mu.Unlock()
			w.cancel(err)
			return
		}
		w.lease = renewed
		w.renewals++
		w.mu.Unlock()
	}
}

// Stop ends the watchdog and waits for it. It returns the lease as last
// renewed and, if a renewal failed, the ErrLost that cancelled the task's
// context. It also cancels that context (with context.Canceled), so call it
// when the task is done. Safe to call more than once.
func (w *Watchdog) Stop() (Lease, error) {
	w.mu.Lock()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.mu.Unlock()
	<-w.done
	w.cancel(context.Canceled)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lease, w.err
}

// Lease returns the lease as last renewed.
func (w *Watchdog) Lease() Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lease
}

// Renewals counts successful renewals so far.
func (w *Watchdog) Renewals() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.renewals
}
