package console

// Stepping sessions: "Step it by hand" on a chapter page. A reader (an
// admin) starts one of an explorable experiment's versions under the
// explorer's scheduler with the reader as its policy (lab.StartSession),
// then releases one actor's next step at a time and sees, after each, who
// waits at which step, who is blocked on a lock and on whom, the timeline
// so far and the invariants evaluated now.
//
// A session is a live goroutine holding a scratch database (and, for most
// experiments, a whole deployable on it), so it is kept in this process's
// memory only, never in a table: its id is random and unguessable, it
// belongs to the admin who started it (anyone else gets 404), at most
// maxPerServer run at once and one per admin, and it ends — its actors
// stopped, its database removed — when the reader ends it, when it has
// had no step for its idle time (10 minutes), or when the process stops.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/fencelab/fencelab/core/lab"
)

const (
	// steppingIdle is how long a stepping session lives without a step.
	steppingIdle = 10 * time.Minute
	// steppingPerServer bounds the sessions alive at once in one process:
	// each holds a scratch database and usually a whole deployable.
	steppingPerServer = 4
	// steppingReapEvery is how often the idle sessions are looked for.
	// A finished session's page stays until the same idle time has passed
	// (its database is gone already; only the view is kept).
	steppingReapEvery = 30 * time.Second
)

var (
	// errSteppingFull: the server's sessions are all taken (429).
	errSteppingFull = errors.New("console: every stepping session of this server is in use")
	// errSteppingMine: this admin has a session already (409).
	errSteppingMine = errors.New("console: you have a stepping session already")
)

// stepper is what a store needs of a running session: lab.Session.
type stepper interface {
	Next(actor string) (lab.SessionView, error)
	Close()
}

// startStepper starts a session of e's version v (lab.StartSession on the
// runner's environment in the console; tests give their own environment).
type startStepper func(ctx context.Context, e lab.Experiment, v lab.Variant) (stepper, lab.SessionView, error)

// stepping is one session as its page shows it.
type stepping struct {
	ID      string
	Exp     lab.Experiment
	Variant lab.Variant
	Owner   string // the admin's subject
	Started time.Time

	// step serialises the reader's steps: two clicks at once must not
	// release two actors, or the second a stale choice (Next is not safe
	// for concurrent use, and a schedule is one choice at a time).
	step sync.Mutex

	mu      sync.Mutex
	s       stepper
	view    lab.SessionView
	last    time.Time // the last step (or the start): the idle clock
	stepped int
	ended   bool
}

// snapshot is the session's view and state under its lock.
func (st *stepping) snapshot() (lab.SessionView, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.view, st.ended
}

// steppingStore holds the live sessions of one process.
type steppingStore struct {
	start    startStepper
	idle     time.Duration
	max      int
	now      func() time.Time // injectable: the idle test moves the clock
	mu       sync.Mutex
	sessions map[string]*stepping
}

func newSteppingStore(start startStepper) *steppingStore {
	return &steppingStore{start: start, idle: steppingIdle, max: steppingPerServer, now: time.Now, sessions: map[string]*stepping{}}
}

// Open starts a session of e's version v for owner. The places are
// counted before the (slow) start so that a burst of clicks cannot start
// more sessions than allowed; a failed start gives its place back.
func (ss *steppingStore) Open(ctx context.Context, e lab.Experiment, v lab.Variant, owner string) (*stepping, error) {
	ss.mu.Lock()
	for _, st := range ss.sessions {
		if st.Owner == owner {
			ss.mu.Unlock()
			return st, errSteppingMine
		}
	}
	if len(ss.sessions) >= ss.max {
		ss.mu.Unlock()
		return nil, errSteppingFull
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		ss.mu.Unlock()
		return nil, err
	}
	st := &stepping{ID: hex.EncodeToString(b[:]), Exp: e, Variant: v, Owner: owner, Started: ss.now(), last: ss.now()}
	st.step.Lock() // nobody steps it before it has started
	ss.sessions[st.ID] = st
	ss.mu.Unlock()
	defer st.step.Unlock()

	s, view, err := ss.start(ctx, e, v)
	if err != nil {
		ss.mu.Lock()
		delete(ss.sessions, st.ID)
		ss.mu.Unlock()
		return nil, err
	}
	st.mu.Lock()
	st.s, st.view, st.last = s, view, ss.now()
	st.mu.Unlock()
	return st, nil
}

// Get returns owner's session id (nil when unknown, ended or another's:
// a session's id is not shown to anyone but its owner).
func (ss *steppingStore) Get(id, owner string) *stepping {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	st := ss.sessions[id]
	if st == nil || st.Owner != owner {
		return nil
	}
	return st
}

// Step releases actor for one step of st and returns the view after it.
func (ss *steppingStore) Step(st *stepping, actor string) (lab.SessionView, error) {
	st.step.Lock()
	defer st.step.Unlock()
	st.mu.Lock()
	s, ended := st.s, st.ended
	st.mu.Unlock()
	if ended || s == nil {
		return st.view, lab.ErrSessionEnded
	}
	v, err := s.Next(actor)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.view, st.last = v, ss.now()
	if err == nil {
		st.stepped++
	}
	return v, err
}

// End ends st: its actors are stopped and its database removed.
func (ss *steppingStore) End(st *stepping) {
	ss.mu.Lock()
	delete(ss.sessions, st.ID)
	ss.mu.Unlock()
	st.mu.Lock()
	s := st.s
	st.ended = true
	st.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// Reap ends every session idle for the idle time or longer and returns
// their ids. A session in the middle of a step is not idle.
func (ss *steppingStore) Reap() []string {
	now := ss.now()
	ss.mu.Lock()
	var idle []*stepping
	for _, st := range ss.sessions {
		st.mu.Lock()
		old := st.s != nil && now.Sub(st.last) >= ss.idle
		st.mu.Unlock()
		// Holding its step lock through End: no step can begin between
		// the idle check and the session's end.
		if old && st.step.TryLock() {
			idle = append(idle, st)
		}
	}
	ss.mu.Unlock()
	var ids []string
	for _, st := range idle {
		ss.End(st)
		st.step.Unlock()
		ids = append(ids, st.ID)
	}
	sort.Strings(ids)
	return ids
}

// Len is the number of live sessions.
func (ss *steppingStore) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.sessions)
}

// Close ends every session (the process is stopping).
func (ss *steppingStore) Close() {
	ss.mu.Lock()
	all := make([]*stepping, 0, len(ss.sessions))
	for _, st := range ss.sessions {
		all = append(all, st)
	}
	ss.mu.Unlock()
	for _, st := range all {
		ss.End(st)
	}
}

// run ends idle sessions every steppingReapEvery, and every session when
// ctx ends (the console's task).
func (ss *steppingStore) run(ctx context.Context) error {
	t := time.NewTicker(steppingReapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ss.Close()
			return nil
		case <-t.C:
			ss.Reap()
		}
	}
}

// variantFlag is the replay command's flag for v: none for the guarded
// run, else the variant's name (lab.Variant.String) as a flag.
func variantFlag(v lab.Variant) string {
	if v == lab.Guarded {
		return ""
	}
	return " --" + v.String()
}

// parseVariant reads the form's variant for e: only versions e declares.
func parseVariant(e lab.Experiment, s string) (lab.Variant, error) {
	switch {
	case s == "" || s == "guarded":
		return lab.Guarded, nil
	case s == "naive" && e.Naive != "":
		return lab.Naive, nil
	case s == "control" && e.Control != "":
		return lab.Control, nil
	}
	return 0, fmt.Errorf("%s has no %q version", e.ID, s)
}
