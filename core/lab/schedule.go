package lab

// Enumerating schedules. A schedule is the sequence of actors released,
// one per step: "A,B,B,A". Every schedule runs from scratch on a fresh
// database (stateless model checking, as loom does for threads): the
// exploration is a depth-first search over the tree of decisions, each
// run recording which actors were waiting at each decision, so the next
// run can replay a prefix and take an untried branch. An actor blocked on
// a lock is not waiting: the tree holds only the schedules PostgreSQL
// lets happen, so with locks there are fewer than the multinomial count.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// ExploreOptions tune an exploration.
type ExploreOptions struct {
	Variant Variant
	// Max bounds the schedules run: when the actors' orders (the
	// multinomial count) exceed it, Max schedules are sampled instead of
	// enumerated (0: DefaultMax).
	Max int
	// Seed seeds the sampling (uniform random walk over the waiting
	// actors at each decision).
	Seed int64
	// Parallel runs up to this many schedules at once in an exhaustive
	// exploration (0 or 1: one at a time). The table is the same: it is
	// sorted by schedule.
	Parallel int
	// Progress, when set, is told each schedule's outcome as it ends
	// (from one goroutine at a time).
	Progress func(n int, o ScheduleOutcome)
}

// DefaultMax is how many schedules an exploration runs at most unless told.
const DefaultMax = 100

// Exploration is what `fencelab lab explore` shows: every schedule run and
// its outcome, the summary, and the first breaking schedule in full.
type Exploration struct {
	ID      string      `json:"id"`
	Claim   string      `json:"claim"`
	Variant string      `json:"variant"`
	Actors  []ActorSpec `json:"actors"`
	// Orders is the multinomial count of the actors' step sequences: the
	// schedules there would be if no step ever blocked another.
	Orders int `json:"orders"`
	// Mode: "exhaustive" (every schedule PostgreSQL allows, less those the
	// partial-order reduction proves equivalent), "sampled" (Max of them,
	// a uniform random walk seeded by Seed) or "serial" (a control: each
	// actor runs all its steps before the next begins).
	Mode      string            `json:"mode"`
	Seed      int64             `json:"seed,omitempty"`
	Reduced   int               `json:"reduced,omitempty"` // branches skipped as equivalent (disjoint Touches)
	Schedules []ScheduleOutcome `json:"schedules"`
	Count     int               `json:"count"`
	// Breaking counts the schedules that broke: caught (naive) or broke
	// (guarded, control).
	Breaking int     `json:"breaking"`
	Summary  string  `json:"summary"`
	Verdict  Verdict `json:"verdict"`
	Exit     int     `json:"exit"`
	// First is the first breaking schedule's full run, and Replay the
	// command that runs it again.
	First   *Result `json:"first,omitempty"`
	Replay  string  `json:"replay,omitempty"`
	Seconds float64 `json:"seconds"`
}

// ScheduleOutcome is one schedule's line of the table.
type ScheduleOutcome struct {
	Schedule string   `json:"schedule"`
	Outcome  string   `json:"outcome"` // holds, caught, not caught, broke, hung, deadlock
	Verdict  Verdict  `json:"verdict"`
	Blocked  []string `json:"blocked,omitempty"`  // steps seen waiting on a lock
	Violated []string `json:"violated,omitempty"` // data invariants that reported rows
	Failures []string `json:"failures,omitempty"`
	Seconds  float64  `json:"seconds"`
}

// Orders is the multinomial count (Σnᵢ)! / Πnᵢ! of the actors' steps.
func Orders(actors []ActorSpec) int {
	total, out := 0, 1
	for _, a := range actors {
		for k := 1; k <= len(a.Steps); k++ {
			total++
			out = out * total / k
		}
	}
	return out
}

// RunSchedule runs e's Explore body under one given schedule: `lab run ID
// --schedule A,B,B,A`. It is the path every schedule of an exploration
// takes, so the replay reaches the same verdict. A choice naming an actor
// that is not waiting at a step fails the run.
func RunSchedule(ctx context.Context, e Experiment, env Env, v Variant, schedule []string) Result {
	if e.Explore == nil {
		rt := Result{ID: e.ID, Chapter: chapterOf(e.ID), Variant: v.String(), Failures: []string{e.ID + " declares no actors to schedule"}}
		judge(&rt, e)
		return rt
	}
	return runVariant(ctx, e, env, v, strictPolicy{schedule})
}

// ParseSchedule reads "A,B,B,A".
func ParseSchedule(s string) []string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Explore runs e under every schedule of its actors (or a sample of them)
// and judges the whole: a guarded exploration holds when every schedule
// holds; a naive one is caught when at least one schedule is caught and
// none failed otherwise; a control runs the serial schedules only (the race
// taken out) and must hold in all. Exit codes are lab run's.
func ExploreExperiment(ctx context.Context, e Experiment, env Env, o ExploreOptions) Exploration {
	start := time.Now()
	ex := Exploration{ID: e.ID, Variant: o.Variant.String(), Seed: o.Seed}
	if e.Explore == nil {
		ex.Summary = e.ID + " declares no actors to explore"
		ex.Verdict, ex.Exit = Broke, Broke.ExitCode()
		return ex
	}
	ex.Claim, ex.Actors, ex.Orders = e.Explore.Claim, e.Explore.Actors, Orders(e.Explore.Actors)
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	var mu sync.Mutex
	breaking := map[string]Result{} // the full run of each breaking schedule
	run := func(pol policy) Result {
		t0 := time.Now()
		r := runVariant(ctx, e, env, o.Variant, pol)
		if pp, ok := pol.(*prefixPolicy); ok && pp.redundant {
			return r // abandoned as equivalent to a schedule explored: not a schedule of the table
		}
		so := outcomeOf(r, time.Since(t0))
		mu.Lock()
		defer mu.Unlock()
		ex.Schedules = append(ex.Schedules, so)
		if o.Progress != nil {
			o.Progress(len(ex.Schedules), so)
		}
		if breaks(o.Variant, r) {
			breaking[r.Schedule] = r
		}
		return r
	}
	switch {
	case o.Variant == Control:
		ex.Mode = "serial"
		for _, order := range permutations(e.Explore.Actors) {
			if ctx.Err() != nil {
				break
			}
			run(serialPolicy{order})
		}
	case ex.Orders <= o.Max:
		ex.Mode = "exhaustive"
		ex.Reduced = exhaustive(ctx, e.Explore, o.Max, o.Parallel, run)
		// One order whatever ran first: schedules sorted by their choices,
		// actors in declaration order.
		rank := map[string]int{}
		for i, a := range e.Explore.Actors {
			rank[a.Name] = i
		}
		slices.SortStableFunc(ex.Schedules, func(a, b ScheduleOutcome) int {
			return slices.CompareFunc(ParseSchedule(a.Schedule), ParseSchedule(b.Schedule), func(x, y string) int { return rank[x] - rank[y] })
		})
	default:
		ex.Mode = "sampled"
		rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed))
		seen := map[string]bool{}
		for tries := 0; len(seen) < o.Max && tries < 4*o.Max && ctx.Err() == nil; tries++ {
			// A walk repeating a schedule already run is dropped from the
			// table (it would only count twice).
			r := run(&randomPolicy{rng: rng})
			if seen[r.Schedule] {
				ex.Schedules = ex.Schedules[:len(ex.Schedules)-1]
				continue
			}
			seen[r.Schedule] = true
		}
	}
	ex.Count = len(ex.Schedules)
	for _, s := range ex.Schedules {
		if breaksOutcome(o.Variant, s) {
			ex.Breaking++
			if r, ok := breaking[s.Schedule]; ok && ex.First == nil {
				ex.First = &r
			}
		}
	}
	judgeExploration(&ex, o.Variant)
	if ex.First != nil {
		flag := ""
		switch o.Variant {
		case Naive:
			flag = " --naive"
		case Control:
			flag = " --control"
		}
		ex.Replay = fmt.Sprintf("fencelab lab run %s%s --schedule %s", e.ID, flag, ex.First.Schedule)
	}
	ex.Seconds = time.Since(start).Seconds()
	return ex
}

func judgeExploration(ex *Exploration, v Variant) {
	failed := 0
	for _, s := range ex.Schedules {
		if len(s.Failures) > 0 {
			failed++
		}
	}
	switch v {
	case Naive:
		ex.Summary = fmt.Sprintf("%d schedules: naive caught in %d of %d", ex.Count, ex.Breaking, ex.Count)
		if ex.Breaking > 0 && failed == 0 {
			ex.Verdict = Caught
		} else {
			ex.Verdict = NotCaught
		}
	default:
		ex.Summary = fmt.Sprintf("%d schedules: %s holds in %d of %d", ex.Count, v, ex.Count-ex.Breaking, ex.Count)
		if ex.Breaking == 0 && ex.Count > 0 {
			ex.Verdict = Held
		} else {
			ex.Verdict = Broke
		}
	}
	if failed > 0 {
		ex.Summary += fmt.Sprintf(" (%d failed before they could be judged)", failed)
	}
	ex.Exit = ex.Verdict.ExitCode()
}

// breaks: the schedule is one the table highlights — caught for a naive
// exploration, anything but holds for the others.
func breaks(v Variant, r Result) bool {
	if v == Naive {
		return r.Verdict == Caught
	}
	return r.Verdict != Held
}

func breaksOutcome(v Variant, s ScheduleOutcome) bool {
	if v == Naive {
		return s.Verdict == Caught
	}
	return s.Verdict != Held
}

func outcomeOf(r Result, d time.Duration) ScheduleOutcome {
	so := ScheduleOutcome{Schedule: r.Schedule, Verdict: r.Verdict, Outcome: string(r.Verdict),
		Blocked: r.Blocked, Failures: r.Failures, Seconds: d.Seconds()}
	for _, v := range r.Invariants {
		if !v.Holds && !v.Schema && v.Error == "" {
			so.Violated = append(so.Violated, v.ID)
		}
	}
	all := strings.Join(r.Failures, "\n")
	for _, s := range r.Timeline {
		all += "\n" + s.Note
	}
	switch {
	case strings.Contains(strings.Join(r.Failures, "\n"), "hung:"):
		so.Outcome = "hung"
	case strings.Contains(all, "40P01") || strings.Contains(all, "deadlock detected"):
		so.Outcome = "deadlock"
	case len(r.Failures) > 0 && r.Verdict == NotCaught:
		so.Outcome = "failed"
	}
	return so
}

// exhaustive runs every schedule the actors allow and returns how many
// branches the partial-order reduction skipped. It is a worklist search:
// each run follows a prefix of choices and then the first waiting actor
// at every further decision; for each decision it made beyond its
// prefix, every other actor that was waiting there becomes a new prefix.
// Each decision point is thus branched once, by the run that reached it
// first, and parallel workers may take prefixes from the list at once.
//
// The reduction keeps, of each class of schedules that differ only in the
// order of commuting steps, the lexicographically least (actors ordered
// as declared): releasing actor Q is skipped when some earlier step, of
// an actor declared after Q, was followed only by steps that commute with
// Q's (the Anisimov–Knuth condition: Q's step could have come first). Two
// steps commute when they belong to different actors and both declare
// Touches, none shared. A run whose every waiting actor is skipped is
// redundant: it is abandoned and not counted.
func exhaustive(ctx context.Context, spec *Explore, limit, parallel int, run func(policy) Result) (reduced int) {
	order := map[string]int{}
	touches := map[string][][]string{}
	for i, a := range spec.Actors {
		order[a.Name] = i
		for _, s := range a.Steps {
			touches[a.Name] = append(touches[a.Name], s.Touches)
		}
	}
	prune := func(cand Option, history []Option) bool {
		for j := len(history) - 1; j >= 0; j-- {
			if !independent(touches, cand, history[j]) {
				return false
			}
			if order[history[j].Actor] > order[cand.Actor] {
				return true
			}
		}
		return false
	}
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		work     = [][]string{nil}
		inFlight int
		runs     int
		wg       sync.WaitGroup
	)
	worker := func() {
		defer wg.Done()
		for {
			mu.Lock()
			for len(work) == 0 && inFlight > 0 {
				cond.Wait()
			}
			if len(work) == 0 || runs >= limit || ctx.Err() != nil {
				mu.Unlock()
				cond.Broadcast()
				return
			}
			prefix := work[len(work)-1] // depth first: the newest prefix
			work = work[:len(work)-1]
			inFlight++
			runs++
			mu.Unlock()

			pol := &prefixPolicy{prefix: prefix, prune: prune}
			r := run(pol)

			mu.Lock()
			inFlight--
			if pol.redundant {
				runs-- // abandoned: not a schedule
				reduced++
			}
			history := make([]Option, 0, len(r.Decisions))
			for i, d := range r.Decisions {
				if i >= len(prefix) {
					// Pushed in reverse so the first waiting actor's
					// branch is taken first.
					for k := len(d.Enabled) - 1; k >= 0; k-- {
						c := d.Enabled[k]
						if c.Actor == d.Chosen {
							continue
						}
						if prune(c, history) {
							reduced++
							continue
						}
						next := make([]string, 0, i+1)
						for _, dd := range r.Decisions[:i] {
							next = append(next, dd.Chosen)
						}
						work = append(work, append(next, c.Actor))
					}
				}
				if o := chosenOption(d.Enabled, d.Chosen); o != nil {
					history = append(history, *o)
				}
			}
			mu.Unlock()
			cond.Broadcast()
		}
	}
	for range max(parallel, 1) {
		wg.Add(1)
		go worker()
	}
	wg.Wait()
	return reduced
}

func chosenOption(enabled []Option, actor string) *Option {
	for i := range enabled {
		if enabled[i].Actor == actor {
			return &enabled[i]
		}
	}
	return nil
}

// independent: both steps declare the keys they touch and share none.
func independent(touches map[string][][]string, a, b Option) bool {
	if a.Actor == b.Actor {
		return false // one actor's steps run in program order
	}
	ta, tb := touches[a.Actor], touches[b.Actor]
	if a.Step >= len(ta) || b.Step >= len(tb) || len(ta[a.Step]) == 0 || len(tb[b.Step]) == 0 {
		return false
	}
	for _, k := range ta[a.Step] {
		if slices.Contains(tb[b.Step], k) {
			return false
		}
	}
	return true
}

func permutations(actors []ActorSpec) [][]string {
	names := make([]string, len(actors))
	for i, a := range actors {
		names[i] = a.Name
	}
	var out [][]string
	var perm func(k int)
	perm = func(k int) {
		if k == len(names) {
			out = append(out, slices.Clone(names))
			return
		}
		for i := k; i < len(names); i++ {
			names[k], names[i] = names[i], names[k]
			perm(k + 1)
			names[k], names[i] = names[i], names[k]
		}
	}
	perm(0)
	return out
}

// prefixPolicy follows prefix, then releases the first waiting actor (in
// declaration order) that the reduction does not skip. When it skips
// every waiting actor the run is redundant and is abandoned.
type prefixPolicy struct {
	prefix    []string
	prune     func(cand Option, history []Option) bool
	history   []Option
	redundant bool
}

// errRedundant abandons a run the reduction proves equivalent to another.
var errRedundant = errors.New("redundant: every waiting actor's step commutes into an order already explored")

func (p *prefixPolicy) choose(n int, enabled []Option, _ *Option) (string, error) {
	pick := func(actor string) (string, error) {
		if o := chosenOption(enabled, actor); o != nil {
			p.history = append(p.history, *o)
		}
		return actor, nil
	}
	if n < len(p.prefix) {
		return pick(p.prefix[n])
	}
	for _, c := range enabled {
		if p.prune == nil || !p.prune(c, p.history) {
			return pick(c.Actor)
		}
	}
	p.redundant = true
	return "", errRedundant
}

// strictPolicy replays a given schedule; running out of it while actors
// still wait is an error (the schedule was not a whole one).
type strictPolicy struct{ schedule []string }

func (p strictPolicy) choose(n int, enabled []Option, _ *Option) (string, error) {
	if n >= len(p.schedule) {
		return "", fmt.Errorf("the schedule %s ends after %d choices, and %s still wait at a step",
			strings.Join(p.schedule, ","), len(p.schedule), optNames(enabled))
	}
	return p.schedule[n], nil
}

// randomPolicy releases a waiting actor chosen uniformly.
type randomPolicy struct{ rng *rand.Rand }

func (p *randomPolicy) choose(_ int, enabled []Option, _ *Option) (string, error) {
	return enabled[p.rng.IntN(len(enabled))].Actor, nil
}

// serialPolicy keeps releasing the actor released last while it waits,
// then the next in order: each actor runs all its steps before the next
// begins (a control's schedules: the race taken out).
type serialPolicy struct{ order []string }

func (p serialPolicy) choose(_ int, enabled []Option, prev *Option) (string, error) {
	if prev != nil {
		for _, c := range enabled {
			if c.Actor == prev.Actor {
				return c.Actor, nil
			}
		}
	}
	for _, name := range p.order {
		for _, c := range enabled {
			if c.Actor == name {
				return name, nil
			}
		}
	}
	return enabled[0].Actor, nil
}
