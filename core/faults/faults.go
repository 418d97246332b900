// Package faults provides named pause points for the book's experiments.
//
// Production code calls Hit at the exact places where a timeline matters
// (after_claim, before_commit, after_bytes_written, …). A nil *Set, or a Set
// where nothing is armed, makes Hit a no-op costing one map lookup under a
// read lock. Tests arm a point to pause a goroutine there (and release it
// when their timeline says so) or to make it fail as if the process died;
// the worker binary arms points from `--pause-at NAME` so a test can pause a
// real OS process and release it by writing a line to its stdin.
//
// A Set is an ordinary value passed to the components under test, not a
// global, so parallel tests never trip over each other's points.
package faults

import (
	"context"
	"errors"
	"sync"
)

// Well-known point names. Modules may add their own; keep them here so the
// experiments' vocabulary is in one place.
const (
	AfterClaim        = "after_claim"
	BeforeCommit      = "before_commit"
	AfterBytesWritten = "after_bytes_written"
	BeforeWrite       = "before_write"
	AfterCommit       = "after_commit"
	BeforeUnlink      = "before_unlink"
)

// ErrInjected is returned by Hit when a test armed the point to fail
// ("the process died here").
var ErrInjected = errors.New("faults: injected failure")

// Action runs when an armed point is hit. It may block (pause), return an
// error (fail) or do both. key identifies what reached the point (a job id,
// a lease name) so an action can target one subject.
type Action func(ctx context.Context, key string) error

// Set is a collection of armed points.
type Set struct {
	mu     sync.RWMutex
	points map[string]Action
}

// New returns an empty set.
func New() *Set { return &Set{points: map[string]Action{}} }

// Hit runs the action armed at name, if any. It returns the action's error,
// or ctx.Err() when the context ends while the action pauses.
func (s *Set) Hit(ctx context.Context, name, key string) error {
	act := s.action(name)
	if act == nil {
		return nil
	}
	return act(ctx, key)
}

// Armed tells whether an action is armed at name: a hot path whose key
// costs something to build (a formatted id) asks first, and builds it
// only for a point a test armed.
func (s *Set) Armed(name string) bool { return s.action(name) != nil }

// action is the action armed at name (nil: none, or a nil Set).
func (s *Set) action(name string) Action {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.points[name]
}

// ArmFunc arms name with an arbitrary action.
func (s *Set) ArmFunc(name string, act Action) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.points[name] = act
}

// Disarm removes the action at name.
func (s *Set) Disarm(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.points, name)
}

// Fail arms name so that every hit (matching key, or any key when key is
// "") returns ErrInjected.
func (s *Set) Fail(name, key string) {
	s.ArmFunc(name, func(_ context.Context, k string) error {
		if key != "" && k != key {
			return nil
		}
		return ErrInjected
	})
}

// Gate pauses the first goroutine that hits a point until Release.
type Gate struct {
	reached chan struct{}
	release chan struct{}
	key     string
	once    sync.Once
	relOnce sync.Once
	mu      sync.Mutex
	hitKey  string
}

// Pause arms name with a Gate that holds the first hit whose key matches
// (any key when key is ""); later hits pass through. The gate disarms
// itself once used, so the rest of the timeline runs normally.
func (s *Set) Pause(name, key string) *Gate {
	g := &Gate{reached: make(chan struct{}), release: make(chan struct{}), key: key}
	var taken sync.Once
	s.ArmFunc(name, func(ctx context.Context, k string) error {
		if g.key != "" && k != g.key {
			return nil
		}
		mine := false
		taken.Do(func() { mine = true })
		if !mine {
			return nil
		}
		g.mu.Lock()
		g.hitKey = k
		g.mu.Unlock()
		g.once.Do(func() { close(g.reached) })
		select {
		case <-g.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return g
}

// Reached is closed when a goroutine is paused at the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Key is the key of the paused hit (valid after Reached).
func (g *Gate) Key() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hitKey
}

// Release lets the paused goroutine continue. Safe to call more than once.
func (g *Gate) Release() { g.relOnce.Do(func() { close(g.release) }) }
