package claim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencelab/fencelab/core/clock"
	"github.com/fencelab/fencelab/core/faults"
)

// PoolOptions configure Work.
type PoolOptions struct {
	// Workers is the number of handler goroutines (default 8).
	Workers int
	// Kinds the pool claims (default: every registered kind).
	Kinds []string
	// Owner written on claims (default: the client's owner).
	Owner string
	// Lease of each claim (default: the client's); heartbeats renew at a third.
	Lease time.Duration
	// FetchLimit bounds the jobs one claim statement takes (default
	// min(Workers, 500)); a fetch never takes more than the free workers.
	// Larger batches cost fewer statements but hold claimed jobs longer
	// before a worker starts them (claim→complete latency).
	FetchLimit int
	// CompleteBatch bounds the completions one statement carries (default 1000).
	CompleteBatch int
	// Pipelines is the number of claim-and-complete loops (default 2). Each
	// sends the successes that accumulated and a claim for the idle workers
	// as one batch — one round trip, one transaction, one WAL flush — so
	// while one loop's batch executes or waits for its flush, the next
	// batch accumulates in the other, and the batch sizes follow the load.
	Pipelines int
	// PollInterval is the longest an idle fetcher waits before looking again
	// (default 1s). Enqueues wake it at once through LISTEN/NOTIFY; the poll
	// picks up jobs that became due (retries, delayed and periodic jobs).
	PollInterval time.Duration
	// NoListen disables LISTEN/NOTIFY (the listener holds one pooled
	// connection for the pool's lifetime).
	NoListen bool
	// ShutdownGrace bounds Work after ctx ends (default 10s): running
	// handlers may finish for most of it; for its last tenth (at most a
	// second) their contexts are cancelled so their outcomes can still be
	// written; at its end Work returns. Jobs still running are left to
	// lapse and be recovered.
	ShutdownGrace time.Duration
	// ExitWhenIdle makes Work return after a claim comes back empty while no
	// job is held: `fencelab worker --exit-when-idle`, for experiments.
	ExitWhenIdle bool
}

func (c *Client) poolDefaults(o PoolOptions) PoolOptions {
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if len(o.Kinds) == 0 {
		o.Kinds = c.KindNames()
	}
	if o.Owner == "" {
		o.Owner = c.owner
	}
	if o.Lease <= 0 {
		o.Lease = c.lease
	}
	if o.FetchLimit <= 0 {
		o.FetchLimit = min(o.Workers, 500)
	}
	o.FetchLimit = min(o.FetchLimit, o.Workers)
	if o.CompleteBatch <= 0 {
		o.CompleteBatch = 1000
	}
	if o.Pipelines <= 0 {
		o.Pipelines = 2
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 10 * time.Second
	}
	return o
}

// errShutdown cancels handlers still running when the grace period ends.
var errShutdown = errors.New("claim: worker pool shutting down")

// held is a claimed job this pool has not finished yet.
type held struct {
	job    *Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   bool
}

type pool struct {
	c     *Client
	o     PoolOptions
	jobs  chan *Job
	slots chan struct{} // one token per idle worker
	done  chan completion
	gone  chan struct{} // closed when Work gave up on overrunning handlers

	mu     sync.Mutex
	held   map[int64]*held
	wakeCh chan struct{} // closed (and replaced) to wake every idle loop
	hint   scanHint
}

// scanHint is where the pool's next claim starts its scan of
// job_ready_idx (see sqlClaim): after the furthest row any of its loops
// has claimed, so that it does not walk the dead entries its own claims
// left since the last VACUUM. The rows before that place were claimed by
// this pool or skipped as locked by another claimer; the exceptions (a
// claimer that rolled back, an enqueue that committed late) are found by
// a scan from the head, taken when a claim comes back short (the pool
// has caught up) and at least every fromHeadEvery.
type scanHint struct {
	after    position
	fromHead time.Time // when a claim last scanned from the head
	short    bool      // the last claim found fewer rows than it asked for
}

// fromHeadEvery bounds how long a ready row behind the hint waits.
const fromHeadEvery = time.Second

// claimFrom is where the next claim starts.
func (p *pool) claimFrom() position {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &p.hint
	if h.short || h.after.due.IsZero() || time.Since(h.fromHead) >= fromHeadEvery {
		h.fromHead = time.Now()
		return position{}
	}
	return h.after
}

// claimed moves the hint past the rows a claim took; asked is how many
// it asked for.
func (p *pool) claimed(jobs []*Job, asked int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &p.hint
	h.short = len(jobs) < asked
	for _, j := range jobs {
		if at := (position{due: j.DueAt, created: j.CreatedAt, id: j.ID}); h.after.before(at) {
			h.after = at
		}
	}
}

// Work runs the worker pool until ctx ends (or, with ExitWhenIdle, until it
// runs dry): Pipelines loops each send, in one round trip, the successes
// that accumulated (one fenced statement) and a claim for up to the number
// of idle workers (one statement), Workers goroutines run handlers, one
// heartbeater renews every held lease in
// one statement and cancels the handlers whose lease was lost, a listener
// wakes the fetcher on NOTIFY, and a scheduler enqueues periodic kinds'
// slots. On shutdown the fetcher stops first; running handlers get
// ShutdownGrace to finish and their results are still committed.
func (c *Client) Work(ctx context.Context, o PoolOptions) error {
	o = c.poolDefaults(o)
	p := &pool{
		c: c, o: o,
		jobs:   make(chan *Job),
		slots:  make(chan struct{}, o.Workers),
		done:   make(chan completion, o.Workers),
		gone:   make(chan struct{}),
		held:   map[int64]*held{},
		wakeCh: make(chan struct{}),
	}
	for range o.Workers {
		p.slots <- struct{}{}
	}
	// Handlers and the fenced writes after them outlive ctx by the grace
	// period; the loops that start new work stop with ctx.
	runCtx, stopRun := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopRun(nil)
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()

	var workers, pipelines, claiming, loops sync.WaitGroup
	for range o.Workers {
		workers.Go(func() {
			for j := range p.jobs {
				p.run(bgCtx, j)
				p.slots <- struct{}{}
			}
		})
	}
	for range o.Pipelines {
		claiming.Add(1)
		pipelines.Go(func() { p.cycle(loopCtx, runCtx, bgCtx, claiming.Done) })
	}
	loops.Go(func() { p.heartbeat(bgCtx) })
	if !o.NoListen {
		loops.Go(func() { p.listen(loopCtx) })
	}
	loops.Go(func() { p.schedule(loopCtx) })

	// Every loop has stopped claiming (shutdown, or ExitWhenIdle ran dry);
	// they go on completing until p.done is closed below.
	claiming.Wait()
	close(p.jobs)

	// One grace in total: handlers run free for most of it, are cancelled
	// for its last part (a tenth, at most a second) so their outcomes can
	// still be written, and at its end Work returns whatever is left.
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	cancelAt := o.ShutdownGrace - min(o.ShutdownGrace/10, time.Second)
	deadline := time.NewTimer(o.ShutdownGrace)
	defer deadline.Stop()
	select {
	case <-finished:
	case <-time.After(cancelAt):
		stopRun(errShutdown)
		select {
		case <-finished:
		case <-deadline.C:
			c.log.Warn("claim: handlers did not return within the grace period; their leases will lapse",
				"held", p.heldCount())
			// The pipelines stop now (p.done stays open: a late handler may
			// still finish and must not send on a closed channel; it sees
			// p.gone instead and leaves its job to lapse).
			close(p.gone)
			stopLoops()
			stopBg()
			pipelines.Wait()
			loops.Wait()
			return nil
		}
	}
	close(p.done)
	pipelines.Wait()
	stopLoops()
	stopBg()
	loops.Wait()
	return nil
}

// cycle is one pipeline: it waits until successes are waiting to be
// written or workers are idle, takes what has accumulated of both (up to
// CompleteBatch and FetchLimit) and writes the completions and claims the
// next jobs in one round trip (Client.completeAndClaim), then hands the
// claimed jobs to the workers. Claiming stops after an empty claim until
// NOTIFY, the poll interval or the last held job finishing (ExitWhenIdle)
// wakes it, and for good when loopCtx ends or ExitWhenIdle finds nothing
// left; stopClaiming is then called once and the loop goes on writing
// completions until p.done is closed (or p.gone: Work gave up). The claim
// statement is never cancelled by shutdown: a claim whose commit raced the
// cancellation would leave jobs running under this owner that nobody runs
// until their leases lapse.
func (p *pool) cycle(loopCtx, runCtx, bgCtx context.Context, stopClaiming func()) {
	claimOn := len(p.o.Kinds) > 0
	stop := func() {
		if claimOn {
			claimOn = false
			stopClaiming()
		}
	}
	if !claimOn {
		stopClaiming()
	}
	defer stop()
	hooks := p.c.hasClaimHooks(p.o.Kinds)
	doneOpen := true
	batch := make([]completion, 0, p.o.CompleteBatch)
	var (
		idle      bool // the last claim came back empty: wait for a wake-up
		idleUntil time.Time
		wakeC     <-chan struct{}
		errDelay  = 50 * time.Millisecond
		failing   time.Time // first failure of the batch being retried
	)
	for {
		if claimOn && loopCtx.Err() != nil {
			stop()
		}
		if !claimOn && !doneOpen && len(batch) == 0 {
			return
		}
		n := 0
		if len(batch) == 0 {
			// Wait for work: a success to write, an idle worker (while
			// claiming and not idle), a wake-up (while idle) or shutdown.
			var slotsC <-chan struct{}
			var timerC <-chan time.Time
			var loopDone <-chan struct{}
			var doneC <-chan completion
			if doneOpen {
				doneC = p.done
			}
			var t *time.Timer
			if claimOn {
				loopDone = loopCtx.Done()
				if idle {
					t = time.NewTimer(time.Until(idleUntil))
					timerC = t.C
				} else {
					slotsC = p.slots
				}
			}
			select {
			case c, ok := <-doneC:
				if ok {
					batch = append(batch, c)
				} else {
					doneOpen = false
				}
			case <-slotsC:
				n = 1
			case <-wakeC:
				idle = false
			case <-timerC:
				idle = false
			case <-loopDone:
			case <-p.gone:
				if t != nil {
					t.Stop()
				}
				return
			}
			if t != nil {
				t.Stop()
			}
		}
		// Take whatever else has accumulated.
	drain:
		for doneOpen && len(batch) < p.o.CompleteBatch {
			select {
			case c, ok := <-p.done:
				if !ok {
					doneOpen = false
					break drain
				}
				batch = append(batch, c)
			default:
				break drain
			}
		}
		if claimOn && !idle && loopCtx.Err() == nil {
		grab:
			for n < p.o.FetchLimit {
				select {
				case <-p.slots:
					n++
				default:
					break grab
				}
			}
		} else {
			for range n {
				p.slots <- struct{}{}
			}
			n = 0
		}
		if len(batch) == 0 && n == 0 {
			continue
		}
		// Take the wake-up channel before claiming: a NOTIFY or the last
		// job finishing during the statement must still wake this loop.
		if n > 0 {
			wakeC = p.wakeC()
		}
		// Completions alone stop with bgCtx (Work giving up); a claim is
		// never cancelled (see above).
		rtCtx := bgCtx
		if n > 0 {
			rtCtx = context.WithoutCancel(bgCtx)
		}
		stale, jobs, err := p.roundTrip(rtCtx, batch, n, hooks)
		for range n - len(jobs) {
			p.slots <- struct{}{}
		}
		if err != nil {
			if failing.IsZero() {
				failing = time.Now()
			}
			if len(batch) > 0 && time.Since(failing) >= p.o.Lease {
				p.c.log.Warn("claim: cannot complete jobs; their leases will lapse", "jobs", len(batch), "err", err)
				p.finishBatch(batch)
				batch, failing = batch[:0], time.Time{}
			} else {
				p.c.log.Warn("claim: complete and claim failed; retrying", "jobs", len(batch), "claim", n, "err", err, "in", errDelay)
			}
			if !clock.Sleep(bgCtx, errDelay) {
				p.finishBatch(batch)
				return
			}
			errDelay = min(2*errDelay, 2*time.Second)
			continue
		}
		errDelay, failing = 50*time.Millisecond, time.Time{}
		if len(stale) > 0 {
			p.c.log.Info("claim: completions refused: fence moved on", "jobs", len(stale))
		}
		p.finishBatch(batch)
		batch = batch[:0]
		for _, j := range jobs {
			p.track(runCtx, j)
			p.jobs <- j
		}
		if n == 0 || len(jobs) > 0 {
			// Claim again at once: a short batch may only mean another
			// claimer had the rest locked. Sleep only after an empty claim.
			continue
		}
		if p.o.ExitWhenIdle && p.heldCount() == 0 {
			stop()
			continue
		}
		idle, idleUntil = true, time.Now().Add(p.o.PollInterval)
	}
}

// roundTrip writes a batch of successes and claims up to n jobs: in one
// pgx batch, or — when a kind has an OnClaim hook, whose claim needs a
// transaction of its own — as two calls.
func (p *pool) roundTrip(ctx context.Context, batch []completion, n int, hooks bool) (stale, jobs []*Job, err error) {
	cp := ClaimParams{Owner: p.o.Owner, Kinds: p.o.Kinds, Limit: n, Lease: p.o.Lease}
	if n > 0 {
		cp.after = p.claimFrom()
		defer func() {
			if err == nil {
				p.claimed(jobs, n)
			}
		}()
	}
	if !hooks {
		return p.c.completeAndClaim(ctx, p.o.Owner, batch, cp)
	}
	if len(batch) > 0 {
		if stale, err = p.c.completeMany(ctx, p.c.pool, p.o.Owner, batch, true); err != nil {
			return nil, nil, err
		}
	}
	if n > 0 {
		if jobs, err = p.c.Claim(ctx, cp); err != nil {
			// The completions committed: report them, and no claim.
			p.c.log.Warn("claim: fetch failed", "err", err)
			return stale, nil, nil
		}
	}
	return stale, jobs, nil
}

// finishBatch releases written (or abandoned) completions' jobs.
func (p *pool) finishBatch(batch []completion) {
	if len(batch) == 0 {
		return
	}
	ids := make([]int64, len(batch))
	for i, b := range batch {
		ids[i] = b.job.ID
	}
	p.untrack(ids...)
}

// signal wakes every idle loop (NOTIFY, or the last held job finished).
func (p *pool) signal() {
	p.mu.Lock()
	close(p.wakeCh)
	p.wakeCh = make(chan struct{})
	p.mu.Unlock()
}

func (p *pool) wakeC() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wakeCh
}

func (p *pool) track(runCtx context.Context, j *Job) {
	ctx, cancel := context.WithCancelCause(runCtx)
	p.mu.Lock()
	p.held[j.ID] = &held{job: j, ctx: ctx, cancel: cancel}
	p.mu.Unlock()
	p.c.m.busy.Inc()
}

func (p *pool) untrack(ids ...int64) {
	p.mu.Lock()
	for _, id := range ids {
		if h, ok := p.held[id]; ok {
			h.cancel(nil)
			delete(p.held, id)
			p.c.m.busy.Dec()
		}
	}
	empty := len(p.held) == 0
	p.mu.Unlock()
	if empty && p.o.ExitWhenIdle {
		p.signal()
	}
}

func (p *pool) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// run is one job on one worker: the after_claim fault point, the handler
// under a context the heartbeat can cancel, then the outcome. A success is
// handed to the pipelines (batched); a failure or unknown is written at once.
func (p *pool) run(bgCtx context.Context, j *Job) {
	p.mu.Lock()
	h := p.held[j.ID]
	p.mu.Unlock()
	// after_claim: the claim has committed and nothing else has happened.
	// An injected failure here is "the process died": the job is abandoned
	// to lapse and be recovered.
	// The key is formatted only for an armed point: on every job it was a
	// string to allocate and collect for nothing.
	if p.c.faults.Armed(faults.AfterClaim) {
		if err := p.c.faults.Hit(h.ctx, faults.AfterClaim, strconv.FormatInt(j.ID, 10)); err != nil {
			p.untrack(j.ID)
			return
		}
	}
	herr := p.c.handle(h.ctx, j)
	switch {
	case j.finished:
		p.untrack(j.ID)
	case herr == nil:
		select {
		case p.done <- completion{job: j, result: resultPtr(j.result)}:
		case <-p.gone: // Work has returned: the lease lapses and recovery reruns it
			p.untrack(j.ID)
		}
	default:
		if err := p.c.finish(bgCtx, j, herr); err != nil && !errors.Is(err, ErrStaleFence) {
			p.c.log.Warn("claim: cannot record job outcome; its lease will lapse", "job", j.ID, "err", err)
		}
		p.untrack(j.ID)
	}
}

func resultPtr(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// heartbeat renews every held lease at a third of the lease in one
// statement. A job it cannot renew has lost its lease: its handler's context
// is cancelled with ErrStaleFence (a heartbeat_lost event is recorded). If
// renewals keep failing for a whole lease, every lease is presumed lost.
func (p *pool) heartbeat(ctx context.Context) {
	every := p.o.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		jobs := make([]*Job, 0, len(p.held))
		for _, h := range p.held {
			if !h.lost {
				jobs = append(jobs, h.job)
			}
		}
		p.mu.Unlock()
		if len(jobs) == 0 {
			lastOK = time.Now()
			continue
		}
		slices.SortFunc(jobs, func(a, b *Job) int { return cmp.Compare(a.ID, b.ID) })
		lost, err := p.c.heartbeatMany(ctx, p.o.Owner, jobs, p.o.Lease)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.c.log.Warn("claim: heartbeat failed", "jobs", len(jobs), "err", err)
			if time.Since(lastOK) >= p.o.Lease {
				lost = jobs
			}
		} else {
			lastOK = time.Now()
		}
		if len(lost) == 0 {
			continue
		}
		p.mu.Lock()
		for _, j := range lost {
			if h, ok := p.held[j.ID]; ok && !h.lost {
				h.lost = true
				h.cancel(fmt.Errorf("%w: lease of job %d lost", ErrStaleFence, j.ID))
			}
		}
		p.mu.Unlock()
		p.c.log.Warn("claim: leases lost; handlers cancelled", "jobs", len(lost))
	}
}

// listen wakes the fetcher when a job of one of the pool's kinds is
// enqueued. It holds one pooled connection; on error it reconnects.
func (p *pool) listen(ctx context.Context) {
	want := map[string]bool{}
	for _, k := range p.o.Kinds {
		want[k] = true
	}
	for ctx.Err() == nil {
		err := p.listenOnce(ctx, want)
		if ctx.Err() != nil {
			return
		}
		p.c.log.Debug("claim: listener stopped; reconnecting", "err", err)
		clock.Sleep(ctx, time.Second)
	}
}

func (p *pool) listenOnce(ctx context.Context, want map[string]bool) error {
	conn, err := p.c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left LISTENing would buffer notifications forever:
	// take it out of the pool and close it when done.
	defer func() { raw := conn.Hijack(); _ = raw.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if want[n.Payload] {
			p.signal()
		}
	}
}

// schedule enqueues each periodic kind's current slot and then each next
// slot as it begins. Every process does this; the (kind, business key)
// unique key makes one job per slot.
func (p *pool) schedule(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range p.o.Kinds {
		k, ok := p.c.Kind(name)
		if !ok || k.Every <= 0 {
			continue
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				slot := time.Now().Truncate(k.Every)
				_, _, err := p.c.Enqueue(ctx, p.c.pool, NewJob{
					Kind: k.Name, BusinessKey: periodicKey(slot), DueAt: slot,
					Payload: map[string]any{"slot": slot.UTC().Format(time.RFC3339)},
				})
				next := time.Until(slot.Add(k.Every))
				if err != nil && ctx.Err() == nil {
					p.c.log.Warn("claim: cannot enqueue periodic job", "kind", k.Name, "err", err)
					next = min(next, 5*time.Second)
				}
				// A little jitter so every process does not hit the unique
				// key at the same instant.
				clock.Sleep(ctx, next+time.Duration(rand.Int64N(int64(min(k.Every/100, time.Second))+1)))
			}
		})
	}
	wg.Wait()
}

// Slot returns the time slot of a periodic kind's job.
func (j *Job) Slot() (time.Time, bool) {
	var p struct {
		Slot time.Time `json:"slot"`
	}
	if err := j.UnmarshalPayload(&p); err != nil || p.Slot.IsZero() {
		return time.Time{}, false
	}
	return p.Slot, true
}
