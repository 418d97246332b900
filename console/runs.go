package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencelab/fencelab/core/lab"
)

const (
	// runTimeout bounds one experiment run (guarded, naive and control together).
	runTimeout = 5 * time.Minute
	// keptRuns bounds the runs remembered for their pages.
	keptRuns = 50
)

// errBusy: every run slot and queue place is taken.
var errBusy = errors.New("console: the lab is busy")

// run is one request to run an experiment: its guarded version and, when
// it has them, its naive version and the naive version's control (the
// same naive code without the race or the fault), one after the other in
// one slot. The control runs so the run page can draw it beside the naive
// run: the reader sees the naive code alone does not break the invariant,
// the interleaving does.
type run struct {
	N       int64
	Exp     lab.Experiment
	By      string
	Queued  time.Time
	mu      sync.Mutex
	state   string // queued, running, done
	guarded *lab.Result
	naive   *lab.Result
	control *lab.Result
	err     string
}

func (r *run) snapshot() (state string, guarded, naive, control *lab.Result, err string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.guarded, r.naive, r.control, r.err
}

// Runner runs experiments in the background on a scratch environment made
// on first use (newLab), at most maxRuns at once and maxQueued waiting: a
// console must not be able to start unbounded deployables.
type Runner struct {
	newLab             func(ctx context.Context) (lab.Env, func() error, error)
	maxRuns, maxQueued int
	log                *slog.Logger

	slots  chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	seq     int64
	waiting int
	runs    []*run // newest last, at most keptRuns
	closed  bool
	env     lab.Env
	closeFn func() error
	envErr  error
	envOnce sync.Once
}

// NewRunner returns a runner whose experiments run on the environment
// newLab provisions on first use (labenv.NewCluster: a throwaway cluster,
// never the live database), at most maxRuns at once (default 1: each
// starts a whole deployable) with maxQueued waiting (default 4); beyond
// that a run is refused. Close removes the environment.
func NewRunner(newLab func(ctx context.Context) (lab.Env, func() error, error), maxRuns, maxQueued int, log *slog.Logger) *Runner {
	if maxRuns <= 0 {
		maxRuns = 1
	}
	if maxQueued <= 0 {
		maxQueued = 4
	}
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{newLab: newLab, maxRuns: maxRuns, maxQueued: maxQueued, log: log,
		slots: make(chan struct{}, maxRuns), ctx: ctx, cancel: cancel}
}

// Enabled reports whether this process can run experiments.
func (r *Runner) Enabled() bool { return r != nil && r.newLab != nil }

// Capacity is the most runs running and waiting at once.
func (r *Runner) Capacity() int { return r.maxRuns + r.maxQueued }

// Start queues a run of e and returns it at once.
func (r *Runner) Start(e lab.Experiment, by string) (*run, error) {
	if !r.Enabled() {
		return nil, errors.New("console: this process has no lab environment")
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("console: the process is stopping")
	}
	if r.waiting >= r.maxRuns+r.maxQueued {
		r.mu.Unlock()
		return nil, errBusy
	}
	r.waiting++
	r.seq++
	ru := &run{N: r.seq, Exp: e, By: by, Queued: time.Now(), state: "queued"}
	r.runs = append(r.runs, ru)
	if len(r.runs) > keptRuns {
		r.runs = r.runs[len(r.runs)-keptRuns:]
	}
	r.mu.Unlock()
	r.wg.Add(1)
	go r.do(ru)
	return ru, nil
}

func (r *Runner) do(ru *run) {
	defer r.wg.Done()
	defer func() { r.mu.Lock(); r.waiting--; r.mu.Unlock() }()
	select {
	case r.slots <- struct{}{}:
	case <-r.ctx.Done():
		ru.mu.Lock()
		ru.state, ru.err = "done", "the console stopped before the run started"
		ru.mu.Unlock()
		return
	}
	defer func() { <-r.slots }()
	ru.mu.Lock()
	ru.state = "running"
	ru.mu.Unlock()
	env, err := r.environment()
	if err != nil {
		ru.mu.Lock()
		ru.state, ru.err = "done", "could not provision the lab's scratch PostgreSQL: "+err.Error()
		ru.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, runTimeout)
	defer cancel()
	g := lab.RunVariant(ctx, ru.Exp, env, lab.Guarded)
	ru.mu.Lock()
	ru.guarded = &g
	ru.mu.Unlock()
	if ru.Exp.Naive != "" && ctx.Err() == nil {
		n := lab.RunVariant(ctx, ru.Exp, env, lab.Naive)
		ru.mu.Lock()
		ru.naive = &n
		ru.mu.Unlock()
	}
	if ru.Exp.Naive != "" && ru.Exp.Control != "" && ctx.Err() == nil {
		k := lab.RunVariant(ctx, ru.Exp, env, lab.Control)
		ru.mu.Lock()
		ru.control = &k
		ru.mu.Unlock()
	}
	ru.mu.Lock()
	ru.state = "done"
	if ctx.Err() != nil {
		ru.err = fmt.Sprintf("the run was stopped: %v", ctx.Err())
	}
	ru.mu.Unlock()
	r.log.Info("console: experiment run", "id", ru.Exp.ID, "by", ru.By, "verdict", g.Verdict)
}

// environment provisions the scratch cluster once.
func (r *Runner) environment() (lab.Env, error) {
	r.envOnce.Do(func() {
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
		defer cancel()
		env, closeFn, err := r.newLab(ctx)
		r.mu.Lock()
		r.env, r.closeFn, r.envErr = env, closeFn, err
		r.mu.Unlock()
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.env, r.envErr
}

// Get returns the run numbered n, if still kept.
func (r *Runner) Get(n int64) *run {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ru := range r.runs {
		if ru.N == n {
			return ru
		}
	}
	return nil
}

// Recent returns the kept runs of experiment id, newest first (all when id
// is "").
func (r *Runner) Recent(id string, limit int) []*run {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*run
	for i := len(r.runs) - 1; i >= 0 && len(out) < limit; i-- {
		if id == "" || r.runs[i].Exp.ID == id {
			out = append(out, r.runs[i])
		}
	}
	return out
}

// Close stops the runs and removes the scratch environment; it may be
// called more than once.
func (r *Runner) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	fn := r.closeFn
	r.closeFn = nil
	r.mu.Unlock()
	if fn != nil {
		if err := fn(); err != nil {
			r.log.Warn("console: remove the lab environment", "err", err)
		}
	}
}
