// Package clock holds the one context-aware wait every background loop
// uses (the claim pool's fetchers and periodic kinds, outbox consumers,
// the shortlink click flusher).
package clock

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, and reports whether the whole d
// passed. A loop stops on false: a cancelled context (shutdown, a lost
// lease) must end a wait at once, never after a backoff's full length —
// time.Sleep would hold a process past its drain deadline.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
