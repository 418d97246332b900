package lab

// A stepping session: one scheduled run whose choices a reader makes by
// hand (the console's "run this actor's next step"). It is the
// exploration's scheduler with a policy that waits for the reader.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionView is what a reader sees between two steps: the actors waiting
// at a step (each with the step it would begin), those blocked on a lock
// (and on whom), the timeline so far and the invariants evaluated on the
// session's database now. Once every actor has finished, Done is set and
// Result is the run judged as lab run judges it.
type SessionView struct {
	Waiting    []Option          `json:"waiting"`
	Blocked    map[string]string `json:"blocked,omitempty"`
	Schedule   []string          `json:"schedule"`
	Timeline   []Step            `json:"timeline"`
	Invariants []InvariantView   `json:"invariants,omitempty"`
	Done       bool              `json:"done"`
	Result     *Result           `json:"result,omitempty"`
}

// Session is a scheduled run driven by Next. Its database and app are
// the run's own, removed when it ends (Close, or ctx ending).
type Session struct {
	views   chan SessionView
	choices chan string
	cancel  context.CancelFunc
	last    SessionView
	ended   bool
}

// ErrSessionEnded: Next after every actor finished, or after Close.
var ErrSessionEnded = errors.New("lab: the stepping session has ended")

// StartSession starts e's Explore body under a scheduler that waits for
// the reader's choices, and returns the first view (every actor at its
// first step). ctx bounds the session: the console ends it after its idle
// time.
func StartSession(ctx context.Context, e Experiment, env Env, v Variant) (*Session, SessionView, error) {
	if e.Explore == nil {
		return nil, SessionView{}, fmt.Errorf("lab: %s declares no actors to step", e.ID)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Session{views: make(chan SessionView), choices: make(chan string), cancel: cancel}
	pol := &manualPolicy{s: s, e: e, ctx: ctx}
	go func() {
		r := runVariant(ctx, e, env, v, pol)
		view := SessionView{Schedule: ParseSchedule(r.Schedule), Timeline: r.Timeline, Invariants: r.Invariants, Done: true, Result: &r}
		select {
		case s.views <- view:
		case <-time.After(cleanupGrace): // nobody is reading any more
		}
	}()
	first, ok := <-s.views
	if !ok {
		return nil, SessionView{}, ErrSessionEnded
	}
	s.last = first
	s.ended = first.Done
	return s, first, nil
}

// Next releases actor for one step and returns the view once no actor is
// running again.
func (s *Session) Next(actor string) (SessionView, error) {
	if s.ended {
		return s.last, ErrSessionEnded
	}
	if chosenOption(s.last.Waiting, actor) == nil {
		return s.last, fmt.Errorf("lab: %s is not waiting at a step (waiting: %s)", actor, optNames(s.last.Waiting))
	}
	select {
	case s.choices <- actor:
	case v := <-s.views: // the run ended on its own (a failure) before taking a choice
		s.last, s.ended = v, true
		return v, ErrSessionEnded
	}
	v := <-s.views
	s.last, s.ended = v, v.Done
	return v, nil
}

// Close ends the session (its actors are stopped, its database removed).
func (s *Session) Close() {
	s.cancel()
	s.ended = true
}

// manualPolicy publishes a view at each decision and waits for the
// reader's choice.
type manualPolicy struct {
	s   *Session
	e   Experiment
	ctx context.Context
	x   *X
}

func (p *manualPolicy) bind(x *X) { p.x = x }

func (p *manualPolicy) choose(_ int, enabled []Option, _ *Option) (string, error) {
	view := SessionView{Waiting: enabled, Timeline: p.x.Steps(), Invariants: p.x.invariantsNow(p.e)}
	if sc := p.x.sched; sc != nil {
		view.Schedule = sc.schedule()
		sc.mu.Lock()
		for i, st := range sc.state {
			if st == blocked {
				if view.Blocked == nil {
					view.Blocked = map[string]string{}
				}
				view.Blocked[sc.actors[i].Name] = sc.waitsOn[i]
			}
		}
		sc.mu.Unlock()
	}
	select {
	case p.s.views <- view:
	case <-p.ctx.Done():
		return "", ErrSessionEnded
	}
	select {
	case c := <-p.s.choices:
		return c, nil
	case <-p.ctx.Done():
		return "", ErrSessionEnded
	}
}

// invariantsNow evaluates the experiment's invariants on its database
// mid-run (nothing when it has none yet or the check cannot run).
func (x *X) invariantsNow(e Experiment) []InvariantView {
	x.mu.Lock()
	db := x.db
	x.mu.Unlock()
	if db == "" || len(e.Invariants) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		return nil
	}
	defer pool.Close()
	return invariantViews(x.Env.Invariants().Run(ctx, pool, e.Invariants...))
}
