package console

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/lab"
)

// checkTimeout bounds one run of every invariant (a large history takes
// tens of seconds: `fencelab bench console` reports it); nowWait bounds how
// long "Check now" holds the person's request before showing the page
// with the check still running.
const (
	checkTimeout = 5 * time.Minute
	nowWait      = 20 * time.Second
)

// checker keeps the invariants' live status. An invariant is a query over
// a whole module's history (PTS-I4 sums every ledger entry): running them
// on every page view would make the page cost what the history costs. So
// the pages read the last result, a page view older than CheckEvery starts
// one fresh check in the background, and "Check now" waits for one; at
// most one check runs at a time, however many people look.
type checker struct {
	pool  *pgxpool.Pool
	invs  *invariant.Registry
	every time.Duration

	mu      sync.Mutex
	last    *checkResult
	running chan struct{} // closed when the check in flight ends
	since   time.Time     // when the check in flight started
}

// Running reports whether a check is in flight and since when.
func (k *checker) Running() (bool, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.running != nil, k.since
}

type checkResult struct {
	At      time.Time
	Took    time.Duration
	Results []invariant.Result
}

func newChecker(pool *pgxpool.Pool, invs *invariant.Registry, every time.Duration) *checker {
	return &checker{pool: pool, invs: invs, every: every}
}

// Current returns the last result; with none yet, the view that starts the
// first check waits up to wait for it (a fresh database answers in well
// under a second), and views while it runs do not wait at all: on a large
// history the first check takes minutes. A stale result starts a fresh
// check without waiting.
func (k *checker) Current(ctx context.Context, wait time.Duration) *checkResult {
	k.mu.Lock()
	last := k.last
	k.mu.Unlock()
	if last == nil {
		if running, _ := k.Running(); running {
			return nil
		}
		done := k.start()
		select {
		case <-done:
		case <-time.After(wait):
		case <-ctx.Done():
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.last
	}
	if time.Since(last.At) > k.every {
		k.start()
	}
	return last
}

// Now runs a fresh check (or joins the one in flight) and waits for it.
func (k *checker) Now(ctx context.Context) *checkResult {
	k.mu.Lock()
	joined := k.running
	k.mu.Unlock()
	if joined != nil {
		// The check in flight may have read rows before the caller's
		// change: wait for it, then run one that starts after.
		select {
		case <-joined:
		case <-ctx.Done():
		}
	}
	select {
	case <-k.start():
	case <-ctx.Done():
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// start begins a check unless one is running; it returns the channel
// closed when the running check ends.
func (k *checker) start() chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.running != nil {
		return k.running
	}
	done := make(chan struct{})
	k.running, k.since = done, time.Now()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		t0 := time.Now()
		res := k.invs.Run(ctx, k.pool)
		r := &checkResult{At: time.Now(), Took: time.Since(t0), Results: res}
		k.mu.Lock()
		k.last, k.running = r, nil
		k.mu.Unlock()
	}()
	return done
}

// chapterOf places an invariant in a chapter of lab.Chapters: by its ID's
// prefix, else by its Chapter field when that is a slug ("" for the
// foundation's CORE-… invariants).
func chapterOf(inv invariant.Invariant) string {
	if s := lab.ChapterOfInvariant(inv.ID); s != "" {
		return s
	}
	if _, ok := lab.ChapterOf(inv.Chapter); ok {
		return inv.Chapter
	}
	return ""
}
