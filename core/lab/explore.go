package lab

// Explore: an experiment run under a scheduler that holds every actor at
// its next step and releases exactly one at a time. Each actor talks to
// PostgreSQL under its own application_name (lab:<actor>), so a lock wait
// is visible in pg_stat_activity: it counts as a blocked step and the
// scheduler moves on to another actor. A schedule is the sequence of
// choices ("A,B,B,A"); schedule.go enumerates them.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// Explore declares an experiment's actors and their steps, and the body
// that runs one schedule of them (`fencelab lab explore`, `lab run
// --schedule`). Keep it small — 2 or 3 actors of at most 4 steps — so an
// exhaustive exploration runs in seconds.
type Explore struct {
	// Claim is what every schedule shows in the guarded version (the
	// experiment's Claim speaks of its own, larger timeline).
	Claim string
	// Actors in the order the schedule notation names them.
	Actors []ActorSpec
	// Run sets up (a database, an app, the opening state), calls
	// x.Interleave once with the actors' body, and may re-read after it.
	// x.Naive and x.Control say which version runs, as for Experiment.Run.
	Run func(x *X)
}

// ActorSpec is one actor: its name (a short word: "A", "clock") and its
// steps. Each step begins where the actor's body calls a.Step (or reaches
// a fault point armed with x.StepAt) and runs until its next one.
type ActorSpec struct {
	Name  string     `json:"name"`
	Steps []StepSpec `json:"steps"`
}

// StepSpec is one step. Touches, when set, names the rows or keys the step
// reads or writes: two steps of different actors that both declare
// Touches and share none commute, and the exploration keeps one order of
// them (partial-order reduction). A step without Touches may touch
// anything.
type StepSpec struct {
	Label   string   `json:"label"`
	Touches []string `json:"touches,omitempty"`
}

// check refuses a spec the schedule notation cannot spell: actor names
// are unique words (no comma, no space), and every actor has a step.
func (e *Explore) check() error {
	seen := map[string]bool{}
	for _, a := range e.Actors {
		switch {
		case a.Name == "" || strings.ContainsAny(a.Name, ", \t"):
			return fmt.Errorf("actor name %q: a schedule spells actors as words separated by commas", a.Name)
		case seen[a.Name]:
			return fmt.Errorf("two actors are called %q", a.Name)
		case len(a.Steps) == 0:
			return fmt.Errorf("actor %s declares no step", a.Name)
		}
		seen[a.Name] = true
	}
	if len(e.Actors) < 2 {
		return fmt.Errorf("an interleaving needs two actors at least, %d declared", len(e.Actors))
	}
	return nil
}

// Steps is a list of steps that declare no keys.
func Steps(labels ...string) []StepSpec {
	out := make([]StepSpec, len(labels))
	for i, l := range labels {
		out[i] = StepSpec{Label: l}
	}
	return out
}

// Actor timeouts: they turn a hang into an outcome. A lock wait in a
// schedule lasts only while the scheduler runs the other actors
// (milliseconds), so a wait reaching lockTimeout is a lock nobody will
// release; PostgreSQL's own deadlock detection (deadlock_timeout, 1 s by
// default) ends a cycle sooner.
const (
	actorLockTimeout      = "5s"
	actorStatementTimeout = "10s"
)

// stepLimit bounds how long one released step may run before the schedule
// is reported hung (the actor neither reached its next step, finished, nor
// waited on a PostgreSQL lock).
var stepLimit = 20 * time.Second

// Actor is one actor of a scheduled run: its body calls Step at each step
// boundary and does its database work through Pool, so the scheduler sees
// its lock waits.
type Actor struct {
	Name  string
	Index int
	X     *X

	s       *scheduler
	ctx     context.Context
	step    int // steps begun so far
	release chan struct{}
	mu      sync.Mutex
	pools   map[string]*pgxpool.Pool
}

type actorKey struct{}

// ActorOf returns the actor a context belongs to (nil if none): fault
// points armed with StepAt pause the actor whose context reaches them.
func ActorOf(ctx context.Context) *Actor {
	a, _ := ctx.Value(actorKey{}).(*Actor)
	return a
}

// Context carries the actor (for StepAt's fault points) and ends when the
// schedule is abandoned.
func (a *Actor) Context() context.Context { return a.ctx }

// Step is a step boundary: the actor waits here until the scheduler
// chooses it. label must be the actor's next declared step; a step the
// spec does not declare fails the run.
func (a *Actor) Step(label string) {
	if err := a.s.arrive(a, label); err != nil {
		runtime.Goexit() // the schedule was abandoned (hung, failed): the actor stops here
	}
}

// Pool is a connection pool on url whose sessions carry
// application_name lab:<actor> (how the scheduler recognises the actor's
// lock waits in pg_stat_activity) and the lock and statement timeouts
// that turn a stuck wait into an error. One pool per URL, closed when the
// run ends.
func (a *Actor) Pool(url string) *pgxpool.Pool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pools[url]; p != nil {
		return p
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		a.X.Fatalf("lab: actor %s: %v", a.Name, err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = AppName(a.Name)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = actorLockTimeout
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = actorStatementTimeout
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		a.X.Fatalf("lab: actor %s: connect: %v", a.Name, err)
	}
	if a.pools == nil {
		a.pools = map[string]*pgxpool.Pool{}
	}
	a.pools[url] = p
	a.X.Cleanup(p.Close)
	return p
}

// Say records a step of the timeline by this actor.
func (a *Actor) Say(action, outcome, note string) {
	a.X.Step(Step{Actor: a.Name, Action: action, Outcome: outcome, Note: note})
}

// LapseJob is a clock actor's move on a claim-engine job: the running
// job's lease is made to have lapsed (set with SQL: the exact boundary,
// never a sleep), recover re-queues it as the product's recovery does
// and returns how many jobs it re-queued, and the job is made due now
// (the re-dispatch jitter skipped), so the schedule's next claimer finds
// it. ok is false when there was no running job to lapse (said in the
// timeline) or a statement failed (reported with X.Error).
func (a *Actor) LapseJob(db pg.Querier, id int64, recover func(context.Context) (int, error)) (recovered int, ok bool) {
	ctx := a.Context()
	tag, err := db.Exec(ctx, `UPDATE job SET lease_until = now() - interval '1 second' WHERE id = $1 AND state = 'running'`, id)
	if err != nil {
		a.X.Error(a.Name, "lapse the lease", err)
		return 0, false
	}
	if tag.RowsAffected() == 0 {
		a.Say("lapse the job's lease", "no running job", "")
		return 0, false
	}
	if recovered, err = recover(ctx); err != nil {
		a.X.Error(a.Name, "recover the expired job", err)
		return 0, false
	}
	if _, err := db.Exec(ctx, `UPDATE job SET due_at = now() WHERE id = $1`, id); err != nil {
		a.X.Error(a.Name, "make the job due", err)
		return 0, false
	}
	return recovered, true
}

// AppName is the application_name of an actor's sessions.
func AppName(actor string) string { return "lab:" + actor }

// StepAt arms a product's fault point as a step boundary: an actor whose
// context (Actor.Context) reaches it waits there for the scheduler, as at
// a.Step(label). Goroutines that carry no actor pass through.
func (x *X) StepAt(fs *faults.Set, point, label string) {
	fs.ArmFunc(point, func(ctx context.Context, _ string) error {
		a := ActorOf(ctx)
		if a == nil || a.s != x.sched {
			return nil
		}
		if err := a.s.arrive(a, label); err != nil {
			return err
		}
		return nil
	})
}

// Scheduled reports whether the run is under a scheduler (lab explore,
// lab run --schedule).
func (x *X) Scheduled() bool { return x.sched != nil }

// Interleave runs body once per declared actor, each on its own goroutine,
// and schedules them: every actor is held at its next step and exactly one
// is released at a time. It returns when every actor has finished, or
// when the schedule was abandoned (its failure is recorded).
func (x *X) Interleave(body func(a *Actor)) {
	x.Helper()
	if x.sched == nil {
		x.Fatalf("lab: Interleave outside a scheduled run (lab explore, lab run --schedule)")
	}
	if x.sched.actors != nil {
		x.Fatalf("lab: Interleave called twice in one schedule: a schedule is one interleaving of the actors")
	}
	if err := x.sched.spec.check(); err != nil {
		x.Fatalf("lab: %v", err)
	}
	x.sched.run(body)
}

// Option is an actor the scheduler may release at a decision, with the
// step it would begin.
type Option struct {
	Actor string `json:"actor"`
	Step  int    `json:"step"` // 0-based index into the actor's steps
	Label string `json:"label"`
}

// Decision is one point of a schedule: the actors that were waiting at a
// step boundary (Enabled), the actors seen blocked on a lock, and the one
// released.
type Decision struct {
	Enabled []Option          `json:"enabled"`
	Blocked map[string]string `json:"blocked,omitempty"` // actor → on whom it waits
	Chosen  string            `json:"chosen"`
}

// policy picks the actor to release at a decision.
type policy interface {
	choose(n int, enabled []Option, prev *Option) (string, error)
}

type actorState int

const (
	running actorState = iota // released (or not yet at its first step)
	waiting                   // at a step boundary, held
	blocked                   // seen waiting on a PostgreSQL lock
	finished
)

// scheduler runs one schedule of an Explore.
type scheduler struct {
	x      *X
	spec   *Explore
	pol    policy
	actors []*Actor

	mu        sync.Mutex
	state     []actorState
	label     []string // the label of the step each waiting actor is at
	waitsOn   []string
	changed   chan struct{} // signalled on every arrival and finish
	aborted   bool
	decisions []Decision
	blockedAt []string // "B:debit" for each step seen blocked
}

func newScheduler(x *X, spec *Explore, pol policy) *scheduler {
	return &scheduler{x: x, spec: spec, pol: pol, changed: make(chan struct{}, 1)}
}

func (s *scheduler) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// arrive: actor a reached the boundary of its step labelled label. It
// waits until released; an error says the schedule was abandoned.
func (s *scheduler) arrive(a *Actor, label string) error {
	specs := s.spec.Actors[a.Index].Steps
	if a.step >= len(specs) || specs[a.step].Label != label {
		want := "no further step"
		if a.step < len(specs) {
			want = fmt.Sprintf("%q", specs[a.step].Label)
		}
		s.x.Errorf("lab: actor %s reached step %q where its spec declares %s", a.Name, label, want)
		s.abort()
		return context.Canceled
	}
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		return context.Canceled
	}
	s.state[a.Index] = waiting
	s.label[a.Index] = label
	s.mu.Unlock()
	s.signal()
	select {
	case <-a.release:
		a.step++
		return nil
	case <-a.ctx.Done():
		return a.ctx.Err()
	}
}

func (s *scheduler) abort() {
	s.mu.Lock()
	s.aborted = true
	s.mu.Unlock()
	s.signal()
}

// run starts the actors and makes every decision of the schedule.
func (s *scheduler) run(body func(a *Actor)) {
	x := s.x
	ctx, cancel := context.WithCancel(x.Context())
	defer cancel()
	n := len(s.spec.Actors)
	s.state = make([]actorState, n)
	s.label = make([]string, n)
	s.waitsOn = make([]string, n)
	var wg sync.WaitGroup
	for i, spec := range s.spec.Actors {
		a := &Actor{Name: spec.Name, Index: i, X: x, s: s, release: make(chan struct{})}
		a.ctx = context.WithValue(ctx, actorKey{}, a)
		s.actors = append(s.actors, a)
	}
	mon := s.monitor()
	if mon != nil {
		defer mon.Close()
	}
	for _, a := range s.actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				s.mu.Lock()
				s.state[a.Index] = finished
				s.mu.Unlock()
				s.signal()
			}()
			defer func() {
				if p := recover(); p != nil {
					x.Errorf("lab: actor %s panicked: %v", a.Name, p)
				}
			}()
			body(a)
		}()
	}
	defer func() {
		cancel() // releases every actor still held (their Step returns an error)
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(cleanupGrace):
			// An actor stuck outside PostgreSQL and deaf to its context:
			// the schedule is reported, not waited for.
			x.Errorf("hung: %s did not stop within %v of the schedule's end", s.runningNames(), cleanupGrace)
		}
	}()
	var prev *Option
	for i := 0; ; i++ {
		if err := s.settle(ctx, mon); err != nil {
			x.Errorf("%v", err)
			s.abort()
			return
		}
		s.mu.Lock()
		if s.aborted {
			s.mu.Unlock()
			return
		}
		var enabled []Option
		blockedBy := map[string]string{}
		done := 0
		for j, st := range s.state {
			switch st {
			case waiting:
				enabled = append(enabled, Option{Actor: s.actors[j].Name, Step: s.actors[j].step, Label: s.label[j]})
			case blocked:
				blockedBy[s.actors[j].Name] = s.waitsOn[j]
			case finished:
				done++
			}
		}
		s.mu.Unlock()
		if done == n {
			return
		}
		if len(enabled) == 0 {
			// Every actor left is blocked on a lock: PostgreSQL's deadlock
			// detection or the lock timeout will end one of the waits;
			// settle again (bounded by stepLimit).
			if err := s.waitChange(ctx, mon); err != nil {
				x.Errorf("%v", err)
				s.abort()
				return
			}
			i--
			continue
		}
		chosen, err := s.pol.choose(i, enabled, prev)
		if err != nil {
			x.Errorf("lab: schedule: %v", err)
			s.abort()
			return
		}
		var opt *Option
		for k := range enabled {
			if enabled[k].Actor == chosen {
				opt = &enabled[k]
			}
		}
		if opt == nil {
			x.Errorf("lab: schedule: choice %d is %s, which is not waiting at a step (waiting: %s)", i+1, chosen, optNames(enabled))
			s.abort()
			return
		}
		d := Decision{Enabled: enabled, Chosen: chosen}
		if len(blockedBy) > 0 {
			d.Blocked = blockedBy
		}
		s.mu.Lock()
		s.decisions = append(s.decisions, d)
		a := s.actorNamed(chosen)
		s.state[a.Index] = running
		s.mu.Unlock()
		x.Step(Step{Actor: chosen, Action: fmt.Sprintf("▸ %s", opt.Label), Outcome: "released",
			Note: fmt.Sprintf("choice %d, step %d of %d", i+1, opt.Step+1, len(s.spec.Actors[a.Index].Steps))})
		a.release <- struct{}{}
		prev = opt
		if err := s.settle(ctx, mon); err != nil {
			x.Errorf("%v", err)
			s.abort()
			return
		}
		s.mu.Lock()
		st, on := s.state[a.Index], s.waitsOn[a.Index]
		if st == blocked {
			s.blockedAt = append(s.blockedAt, chosen+":"+opt.Label)
		}
		s.mu.Unlock()
		if st == blocked {
			x.Step(Step{Actor: chosen, Action: opt.Label, Outcome: "blocked", Note: "waits on a lock held by " + on})
		}
	}
}

func optNames(os []Option) string {
	names := make([]string, len(os))
	for i, o := range os {
		names[i] = o.Actor
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func (s *scheduler) actorNamed(name string) *Actor {
	for _, a := range s.actors {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// monitor is the scheduler's own session on the experiment's database,
// for reading pg_stat_activity (nil when the run has no database yet).
func (s *scheduler) monitor() *pgxpool.Pool {
	s.x.mu.Lock()
	db := s.x.db
	s.x.mu.Unlock()
	if db == "" {
		return nil
	}
	cfg, err := pgxpool.ParseConfig(db)
	if err != nil {
		return nil
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = "fencelab-lab-scheduler"
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil
	}
	return p
}

// sqlLockWaits lists the actors' sessions waiting on a lock in this
// database, with the application_name of each session blocking them.
const sqlLockWaits = `
SELECT w.application_name,
       coalesce((SELECT string_agg(DISTINCT coalesce(nullif(b.application_name, ''), 'backend ' || b.pid), ', ')
                   FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(w.pid))), '')
  FROM pg_stat_activity w
 WHERE w.datname = current_database() AND w.wait_event_type = 'Lock' AND w.application_name LIKE 'lab:%'`

// lockWaits samples which actors wait on a lock now.
func (s *scheduler) lockWaits(ctx context.Context, mon *pgxpool.Pool) map[string]string {
	out := map[string]string{}
	if mon == nil {
		return out
	}
	rows, err := mon.Query(ctx, sqlLockWaits)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var app, by string
		if rows.Scan(&app, &by) == nil {
			out[strings.TrimPrefix(app, "lab:")] = by
		}
	}
	return out
}

// settle waits until no actor is running: each is held at a step, has
// finished, or is seen waiting on a lock. An actor running past stepLimit
// makes the schedule hung.
func (s *scheduler) settle(ctx context.Context, mon *pgxpool.Pool) error {
	deadline := time.Now().Add(stepLimit)
	for {
		s.mu.Lock()
		aborted := s.aborted
		var busy []int
		for i, st := range s.state {
			if st == running || st == blocked {
				busy = append(busy, i)
			}
		}
		s.mu.Unlock()
		if aborted {
			return nil
		}
		if len(busy) == 0 {
			return nil
		}
		waits := s.lockWaits(ctx, mon)
		s.mu.Lock()
		still := false
		for _, i := range busy {
			if s.state[i] != running && s.state[i] != blocked {
				continue // it arrived or finished meanwhile
			}
			if by, ok := waits[s.actors[i].Name]; ok {
				s.state[i], s.waitsOn[i] = blocked, by
			} else {
				s.state[i] = running
				still = true
			}
		}
		s.mu.Unlock()
		if !still {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hung: %s neither reached its next step, finished, nor waited on a lock within %v", s.runningNames(), stepLimit)
		}
		select {
		case <-s.changed:
		case <-time.After(2 * time.Millisecond): // polling pg_stat_activity: an observable state, not a guessed duration
		case <-ctx.Done():
			return fmt.Errorf("hung: the run ended (%v) with %s still running", context.Cause(ctx), s.runningNames())
		}
	}
}

// waitChange waits, while every actor left is blocked, for one of them to
// move (its lock granted, or its wait ended by deadlock detection or the
// lock timeout).
func (s *scheduler) waitChange(ctx context.Context, mon *pgxpool.Pool) error {
	deadline := time.Now().Add(stepLimit)
	countBlocked := func() (n int) {
		for _, st := range s.state {
			if st == blocked {
				n++
			}
		}
		return n
	}
	s.mu.Lock()
	atEntry := countBlocked()
	s.mu.Unlock()
	for {
		waits := s.lockWaits(ctx, mon)
		s.mu.Lock()
		moved := false
		for i, st := range s.state {
			switch st {
			case blocked:
				if _, ok := waits[s.actors[i].Name]; !ok {
					s.state[i] = running
					moved = true
				}
			case waiting, running:
				moved = true // it was granted its lock and went on
			}
		}
		// One that finished since (its wait ended in an error, or it was
		// granted the lock and ran to its end) is a move too.
		moved = moved || countBlocked() < atEntry
		s.mu.Unlock()
		if moved {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hung: every actor left waits on a lock and none was granted or ended within %v", stepLimit)
		}
		select {
		case <-s.changed:
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("hung: the run ended (%v) with every actor left waiting on a lock", context.Cause(ctx))
		}
	}
}

func (s *scheduler) runningNames() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for i, st := range s.state {
		if st == running {
			names = append(names, s.actors[i].Name)
		}
	}
	if len(names) == 0 {
		return "no actor"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Schedule returns the choices made so far, in the notation "A,B,B,A".
func (s *scheduler) schedule() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.decisions))
	for i, d := range s.decisions {
		out[i] = d.Chosen
	}
	return out
}
