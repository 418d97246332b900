package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/pg"
)

// Interval is one actor's time in a critical section, by the database's
// clock (Step.DBTime, Step.DBEnd).
type Interval struct {
	Actor    string
	From, To time.Time
}

// Overlap checks that the actors' intervals share an instant — every one
// of them was in the critical section at once — and records that as a
// step; otherwise it fails the run with "no overlap observed". It is the
// checked form of a claim that says "at once" (Experiment.Overlap).
func (x *X) Overlap(what string, ivs ...Interval) bool {
	x.Helper()
	if len(ivs) < 2 {
		x.Errorf("no overlap observed: %s: %d actor(s) in the critical section, two are needed", what, len(ivs))
		return false
	}
	from, to := ivs[0].From, ivs[0].To
	actors := make([]string, len(ivs))
	for i, iv := range ivs {
		if iv.From.After(from) {
			from = iv.From
		}
		if iv.To.Before(to) {
			to = iv.To
		}
		actors[i] = fmt.Sprintf("%s [%s … %s]", iv.Actor, iv.From.Format("15:04:05.000000"), iv.To.Format("15:04:05.000000"))
	}
	if iv := ivs[0]; iv.From.IsZero() || iv.To.IsZero() || !from.Before(to) {
		x.Errorf("no overlap observed: %s: %s", what, strings.Join(actors, ", "))
		return false
	}
	x.observed(Step{Actor: "db", Action: "overlap: " + what, Outcome: "observed",
		Note: strings.Join(actors, ", "), DBTime: from, DBEnd: to})
	return true
}

func (x *X) observed(s Step) {
	x.mu.Lock()
	x.overlaps = append(x.overlaps, s.Note)
	x.mu.Unlock()
	x.Step(s)
}

// Overlapped reports whether the run has observed an overlap so far.
func (x *X) Overlapped() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.overlaps) > 0
}

// DBNow is the database's clock_timestamp() read through q: for stamping a
// step the lab drives with the database's time next to it.
func (x *X) DBNow(q pg.Querier) time.Time {
	x.Helper()
	var t time.Time
	if err := q.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&t); err != nil {
		x.Fatalf("lab: read the database clock: %v", err)
	}
	return t
}

// watchPeriod is how often the overlap watcher samples pg_stat_activity.
const watchPeriod = 2 * time.Millisecond

// ActorPrefix starts the application_name of a session that acts for one
// of the timeline's actors ("lab:client-3"): the overlap watcher counts
// such sessions, and no others but the ones declared with ActorSessions.
const ActorPrefix = "lab:"

// ActorApplicationName is the application_name a session opened for actor
// carries, so the overlap watcher can tell it from the lab's own sessions.
func ActorApplicationName(actor string) string { return ActorPrefix + actor }

// ActorSessions declares that every session with this application_name
// acts for the timeline's actors: the app's pool, whose sessions serve the
// actors' requests (x.Start declares it), or a worker process's. A
// session neither declared nor tagged with ActorPrefix — the lab's setup
// and inspection, the test harness, the watcher — is not an actor, and a
// lock it holds or waits on is no evidence that two actors met.
func (x *X) ActorSessions(applicationName string) {
	if applicationName == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, a := range x.actorApps {
		if a == applicationName {
			return
		}
	}
	x.actorApps = append(x.actorApps, applicationName)
}

// isActor reports whether a session with application_name app acts for
// one of the timeline's actors.
func (x *X) isActor(app string) bool {
	if strings.HasPrefix(app, ActorPrefix) {
		return true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, a := range x.actorApps {
		if a == app {
			return true
		}
	}
	return false
}

// sqlSessions lists the experiment's client sessions with what each is
// doing and which sessions block it. A backend blocked by another actor's
// lock is the plainest evidence that two actors were inside the critical
// section at once (the blocker holds it, the waiter is in it, waiting).
// Failing that, two actors' sessions running statements at the same
// instant, both started before the sample, overlap in database time. The
// blockers may be idle in their transaction, so every state is listed.
const sqlSessions = `
SELECT w.pid, coalesce(w.application_name, ''), coalesce(w.state, '') = 'active', coalesce(w.query_start, w.backend_start), clock_timestamp(),
       coalesce(w.wait_event_type, '') = 'Lock', left(regexp_replace(w.query, '\s+', ' ', 'g'), 80),
       coalesce((SELECT array_agg(b) FROM unnest(pg_blocking_pids(w.pid)) b), '{}')
  FROM pg_stat_activity w
 WHERE w.datname = current_database() AND w.pid <> pg_backend_pid()
   AND w.backend_type = 'client backend'
 ORDER BY 4`

// session is one row of sqlSessions.
type session struct {
	pid     int32
	app     string
	active  bool
	started time.Time
	now     time.Time
	locked  bool
	query   string
	by      []int32
}

func (s session) who() string {
	return fmt.Sprintf("backend %d %s: %s", s.pid, s.app, s.query)
}

// actorEvidence finds, in one sample, an actor's session waiting on a lock
// held by another actor's session (wait), or else the last two actors'
// sessions running statements at once (both).
func (x *X) actorEvidence(sessions []session) (wait *Step, both []Interval) {
	actors := map[int32]session{}
	for _, s := range sessions {
		if x.isActor(s.app) {
			actors[s.pid] = s
		}
	}
	var inFlight []Interval
	for _, s := range sessions {
		if _, ok := actors[s.pid]; !ok || !s.active {
			continue
		}
		inFlight = append(inFlight, Interval{Actor: s.who(), From: s.started, To: s.now})
		if !s.locked || wait != nil {
			continue
		}
		for _, b := range s.by {
			if blocker, ok := actors[b]; ok && b != s.pid {
				wait = &Step{Actor: "db", Action: "overlap: a lock wait (pg_stat_activity)", Outcome: "observed",
					Note:   fmt.Sprintf("%s waits on a lock held by backend %d %s", s.who(), blocker.pid, blocker.app),
					DBTime: s.started, DBEnd: s.now}
				break
			}
		}
	}
	if len(inFlight) >= 2 {
		both = inFlight[len(inFlight)-2:]
	}
	return wait, both
}

// watch samples pg_stat_activity on url until the run ends and records the
// first overlap of two actors it sees: an actor's session waiting on a
// lock another actor's session holds (preferred), or two actors'
// statements in flight at once. Sessions that act for no actor are never
// evidence (ActorSessions). It runs only for experiments whose claim needs
// an overlap (Experiment.Overlap).
func (x *X) watch(url string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	x.mu.Lock()
	x.watchStop = func() { cancel(); <-done }
	x.mu.Unlock()
	x.Cleanup(func() { cancel(); <-done }) // a run that failed early stops it too
	go func() {
		defer close(done)
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return
		}
		cfg.MaxConns = 1
		cfg.ConnConfig.RuntimeParams["application_name"] = "fencelab-lab-overlap"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return
		}
		defer pool.Close()
		var both []Interval // the best pair in flight at once so far
		tick := time.NewTicker(watchPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				if len(both) == 2 {
					x.observed(Step{Actor: "db", Action: "overlap: two actors' statements in flight at once (pg_stat_activity)",
						Outcome: "observed", Note: both[0].Actor + "; " + both[1].Actor, DBTime: both[1].From, DBEnd: both[1].To})
				}
				return
			case <-tick.C:
			}
			rows, err := pool.Query(ctx, sqlSessions)
			if err != nil {
				continue
			}
			var sessions []session
			for rows.Next() {
				var s session
				if rows.Scan(&s.pid, &s.app, &s.active, &s.started, &s.now, &s.locked, &s.query, &s.by) == nil {
					sessions = append(sessions, s)
				}
			}
			rows.Close()
			wait, pair := x.actorEvidence(sessions)
			x.samples.Add(1)
			if wait != nil {
				x.observed(*wait)
				return
			}
			if pair != nil && both == nil {
				both = pair
			}
		}
	}()
}

// endOverlap stops the watcher and fails the run if the experiment needs
// an overlap and none was observed.
func (x *X) endOverlap(e Experiment) {
	x.Helper()
	x.mu.Lock()
	stop := x.watchStop
	x.watchStop = nil
	x.mu.Unlock()
	if stop != nil {
		stop()
	}
	if x.overlap && !x.Overlapped() {
		x.Errorf("no overlap observed: %s claims its actors were in the critical section at once, and the run saw no lock wait, no overlapping database time and no pause point reached by both", e.ID)
	}
}
