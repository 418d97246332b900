package outbox

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/clock"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// Defaults for Consumer.
const (
	DefaultBatchSize    = 256
	DefaultPollInterval = 50 * time.Millisecond
	DefaultLeaseTTL     = 10 * time.Second
)

// Fault points of a batch (key: the consumer's name).
const (
	// PointBeforeBatch: the runner holds the lease and is about to open a
	// batch transaction (nothing locked yet).
	PointBeforeBatch = "outbox.before_batch"
	// PointBeforeCommit (= faults.BeforeCommit): effects, inbox rows and
	// the position advance are written, not committed.
	PointBeforeCommit = faults.BeforeCommit
	// PointAfterCommit (= faults.AfterCommit): the batch has committed.
	// A design that acknowledged separately would crash here and redeliver.
	PointAfterCommit = faults.AfterCommit
)

// Handler applies one event inside the batch transaction tx, which also
// writes the event's inbox row and advances the position. It must not
// call out of the database (no transaction spans a network call): to
// trigger an external effect, enqueue a claim-engine job here.
//
// An error stops the batch before ev: the events before it commit, ev is
// retried after a backoff, and the consumer does not move past it. A
// handler that wants to drop a poison event logs it and returns nil.
type Handler func(ctx context.Context, tx pgx.Tx, ev Event) error

// BatchHandler is Handler for a whole batch at once (aggregated counter
// increments, multi-row inserts); evs are in delivery order, redeliveries
// already removed. An error rolls the whole batch back and retries it.
type BatchHandler func(ctx context.Context, tx pgx.Tx, evs []Event) error

// Consumer describes one named consumer. Exactly one of Handle and
// HandleBatch is set.
type Consumer struct {
	Name        string   // unique; also its metrics label
	Topics      []string // fixed once the consumer exists: use a new name to subscribe differently
	Handle      Handler
	HandleBatch BatchHandler

	BatchSize    int           // events per transaction (DefaultBatchSize)
	PollInterval time.Duration // idle poll period (DefaultPollInterval)
	LeaseTTL     time.Duration // lease length; renewed every batch and every LeaseTTL/3 when idle (DefaultLeaseTTL)
}

func (c *Consumer) validate() error {
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("outbox: invalid consumer name %q", c.Name)
	}
	if len(c.Topics) == 0 || len(c.Topics) > 32 {
		return fmt.Errorf("outbox: consumer %s needs 1..32 topics", c.Name)
	}
	for _, t := range c.Topics {
		if !nameRE.MatchString(t) {
			return fmt.Errorf("outbox: consumer %s: invalid topic %q", c.Name, t)
		}
	}
	if (c.Handle == nil) == (c.HandleBatch == nil) {
		return fmt.Errorf("outbox: consumer %s needs exactly one of Handle and HandleBatch", c.Name)
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	return nil
}

// Options configure a Runner.
type Options struct {
	Owner  string // lease holder id; default host:pid:random
	Faults *faults.Set
	Log    *slog.Logger
	// Metrics receives the runner's series (nil: counted, not
	// registered); the runners of one process share them.
	Metrics prometheus.Registerer
}

var (
	// ErrHeld: another runner holds the consumer's lease.
	ErrHeld = errors.New("outbox: consumer lease held by another runner")
	// ErrLost: the lease expired or was taken over; the batch changed nothing.
	ErrLost = errors.New("outbox: consumer lease lost")
	// ErrTopicsChanged: the consumer exists with other topics.
	ErrTopicsChanged = errors.New("outbox: consumer exists with other topics")
)

// Runner runs one consumer. Run it as an app.Task in as many processes as
// you like; at most one holds the lease and applies events at a time. A
// Runner itself is driven by one goroutine at a time (Run, or RunOnce /
// CatchUp from a test).
type Runner struct {
	pool   *pgxpool.Pool
	c      Consumer
	owner  string
	faults *faults.Set
	log    *slog.Logger
	m      runnerMetrics

	registered bool
	held       bool
	fence      int64
	renewedAt  time.Time
	pos        Position // as of our last commit (a hint for peek; batches re-read it)
}

// NewRunner validates c and returns its runner.
func NewRunner(pool *pgxpool.Pool, c Consumer, o Options) (*Runner, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if o.Owner == "" {
		o.Owner = defaultOwner()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Runner{pool: pool, c: c, owner: o.Owner, faults: o.Faults,
		log: o.Log.With("consumer", c.Name, "owner", o.Owner), m: newRunnerMetrics(o.Metrics, c.Name)}, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = crand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Owner is the runner's lease-holder id.
func (r *Runner) Owner() string { return r.owner }

// Fence is the fence of the lease the runner holds (0 before it holds one).
func (r *Runner) Fence() int64 { return r.fence }

// Register creates the consumer's row (position at the very beginning) if
// it does not exist. It refuses a consumer whose stored topics differ:
// changing a subscription under an existing position would either skip the
// new topic's history or break OUTBOX-I2.
func Register(ctx context.Context, db pg.Querier, c Consumer) error {
	if _, err := db.Exec(ctx, sqlRegister, c.Name, c.Topics); err != nil {
		return fmt.Errorf("outbox: register %s: %w", c.Name, pg.MapError(err))
	}
	var stored []string
	if err := db.QueryRow(ctx, sqlTopics, c.Name).Scan(&stored); err != nil {
		return fmt.Errorf("outbox: register %s: %w", c.Name, pg.MapError(err))
	}
	a, b := slices.Clone(stored), slices.Clone(c.Topics)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return fmt.Errorf("%w: %s has %v, code says %v", ErrTopicsChanged, c.Name, stored, c.Topics)
	}
	return nil
}

// Run applies events until ctx ends, then releases the lease.
func (r *Runner) Run(ctx context.Context) error {
	defer r.release()
	backoff := r.c.PollInterval
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrHeld):
			// Someone else is the active runner. Standing by costs one
			// UPDATE that matches nothing per check; a tenth of the lease
			// bounds the failover delay after an expiry.
			if !clock.Sleep(ctx, max(r.c.PollInterval, r.c.LeaseTTL/10)) {
				return nil
			}
			continue
		case errors.Is(err, ErrLost):
			r.log.Warn("outbox lease lost; will try to reacquire")
		case err != nil:
			r.log.Error("outbox batch failed; retrying", "err", err, "in", backoff)
			if !clock.Sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = r.c.PollInterval
		if n == r.c.BatchSize {
			continue // a full batch: more may be waiting
		}
		// Jitter keeps runners of many consumers from polling in step.
		if !clock.Sleep(ctx, r.c.PollInterval/2+rand.N(r.c.PollInterval)) {
			return nil
		}
	}
	return nil
}

// RunOnce acquires the lease if the runner does not hold it, then applies
// at most one batch and returns how many events it applied (redeliveries
// skipped by the inbox are not counted). Tests call it to step a consumer
// synchronously. When idle it only peeks, and commits nothing unless the
// lease is due for renewal.
func (r *Runner) RunOnce(ctx context.Context) (int, error) {
	if !r.registered {
		if err := Register(ctx, r.pool, r.c); err != nil {
			return 0, err
		}
		r.registered = true
	}
	if !r.held {
		if err := r.acquire(ctx); err != nil {
			return 0, err
		}
	}
	if time.Since(r.renewedAt) < r.c.LeaseTTL/3 {
		var ready bool
		if err := r.pool.QueryRow(ctx, sqlPeek, r.c.Topics, r.pos.TxID, r.pos.ID).Scan(&ready); err != nil {
			return 0, fmt.Errorf("outbox: peek %s: %w", r.c.Name, err)
		}
		if !ready {
			return 0, nil
		}
	}
	n, err := r.batch(ctx, r.c.BatchSize)
	var he *handlerError
	if errors.As(err, &he) && he.index > 0 && r.c.Handle != nil {
		// Apply the events before the failing one, so the consumer stops
		// exactly at it; the caller retries it after a backoff.
		if m, err2 := r.batch(ctx, he.index); err2 == nil {
			n = m
		}
	}
	return n, err
}

// Drain runs batches until one applies nothing, and returns the total.
func (r *Runner) Drain(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := r.RunOnce(ctx)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// CatchUp steps the runner until it has applied every event on its topics
// that was committed when CatchUp was called, or ctx ends. Other
// transactions still open on the server may hold the horizon back for a
// while; CatchUp waits them out, polling at the consumer's interval. Tests
// use it where a single RunOnce would depend on the rest of the cluster.
// A lease that expired between steps is taken again, as Run does.
func (r *Runner) CatchUp(ctx context.Context) (int, error) {
	var target Position
	err := r.pool.QueryRow(ctx, sqlLastEvent, r.c.Topics).Scan(&target.TxID, &target.ID)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: catch up %s: %w", r.c.Name, err)
	}
	total, lost := 0, 0
	for {
		n, err := r.RunOnce(ctx)
		total += n
		if errors.Is(err, ErrLost) && lost < 3 {
			// The lease expired between two steps (a test that steps the
			// runner may pause longer than the TTL). Like Run, take it
			// again under a new fence — or stop with ErrHeld if another
			// runner has it. Nothing was applied under the lost fence
			// (OUTBOX-I2: the batch that found it lost rolled back).
			lost++
			continue
		}
		if err != nil {
			return total, err
		}
		lost = 0
		if target.less(r.pos) || target == r.pos {
			return total, nil
		}
		if n == 0 && !clock.Sleep(ctx, r.c.PollInterval) {
			return total, ctx.Err()
		}
	}
}

func (r *Runner) acquire(ctx context.Context) error {
	err := r.pool.QueryRow(ctx, sqlAcquire, r.c.Name, r.owner, r.c.LeaseTTL.Milliseconds()).Scan(&r.fence)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return ErrHeld
	}
	if err != nil {
		return fmt.Errorf("outbox: acquire %s: %w", r.c.Name, err)
	}
	// The position is unknown until a batch reads it under the lock, so
	// the first RunOnce after acquiring runs a batch instead of peeking.
	r.held, r.renewedAt, r.pos = true, time.Time{}, Position{}
	r.m.acquired.Inc()
	r.log.Debug("outbox lease acquired", "fence", r.fence)
	return nil
}

func (r *Runner) release() {
	if !r.held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = r.pool.Exec(ctx, sqlRelease, r.c.Name, r.owner, r.fence)
	r.held = false
}

// handlerError is a Handler failure at batch index.
type handlerError struct {
	index int
	event int64
	err   error
}

func (e *handlerError) Error() string {
	return fmt.Sprintf("outbox: handler failed on event %d: %v", e.event, e.err)
}
func (e *handlerError) Unwrap() error { return e.err }

// batch is one transaction: lock the consumer under the fence, read up to
// limit events below the horizon, drop the ones the inbox has seen, apply
// the rest, advance the position, commit. All of it or none of it.
func (r *Runner) batch(ctx context.Context, limit int) (int, error) {
	if err := r.faults.Hit(ctx, PointBeforeBatch, r.c.Name); err != nil {
		return 0, err
	}
	start := time.Now()
	var (
		applied int
		newPos  Position
	)
	bctx := context.WithValue(ctx, leaseKey{}, Lease{Owner: r.owner, Fence: r.fence})
	err := pg.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		var pos Position
		err := tx.QueryRow(ctx, sqlLock, r.c.Name, r.owner, r.fence, r.c.LeaseTTL.Milliseconds()).Scan(&pos.TxID, &pos.ID)
		if errors.Is(pg.MapError(err), pg.ErrNotFound) {
			return ErrLost
		}
		if err != nil {
			return err
		}
		horizon, evs, err := read(ctx, tx, r.c.Topics, pos, limit)
		if err != nil {
			return err
		}
		newPos = pos
		if len(evs) > 0 {
			newPos = Position{TxID: evs[len(evs)-1].TxID, ID: evs[len(evs)-1].ID}
		}
		if len(evs) < limit && newPos.less(Position{TxID: horizon}) {
			// Everything below the horizon on our topics has been read:
			// skip ahead, so later reads do not rescan other topics' events.
			newPos = Position{TxID: horizon}
		}
		fresh, err := r.inbox(ctx, tx, evs)
		if err != nil {
			return err
		}
		if err := r.apply(bctx, tx, fresh); err != nil {
			return err
		}
		applied = len(fresh)
		if len(evs) > len(fresh) {
			r.m.redelivered.Add(float64(len(evs) - len(fresh)))
		}
		if newPos != pos {
			if _, err := tx.Exec(ctx, sqlAdvance, r.c.Name, r.fence, newPos.TxID, newPos.ID, applied); err != nil {
				return err
			}
		}
		return r.faults.Hit(ctx, PointBeforeCommit, r.c.Name)
	})
	if errors.Is(err, ErrLost) {
		r.held = false
		r.m.lost.Inc()
		return 0, ErrLost
	}
	if err != nil {
		return 0, err
	}
	r.renewedAt, r.pos = start, newPos
	r.m.applied.Add(float64(applied))
	r.m.batch.Observe(time.Since(start).Seconds())
	if err := r.faults.Hit(ctx, PointAfterCommit, r.c.Name); err != nil {
		return applied, err
	}
	return applied, nil
}

// read returns the horizon and up to limit events after pos below it.
func read(ctx context.Context, tx pgx.Tx, topics []string, pos Position, limit int) (uint64, []Event, error) {
	rows, err := tx.Query(ctx, sqlRead, topics, pos.TxID, pos.ID, limit)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var (
		horizon uint64
		evs     []Event
	)
	for rows.Next() {
		var (
			id      *int64
			txid    *uint64
			topic   *string
			key     *string
			payload []byte
			created *time.Time
		)
		if err := rows.Scan(&horizon, &id, &txid, &topic, &key, &payload, &created); err != nil {
			return 0, nil, err
		}
		if id == nil {
			continue // the LEFT JOIN's empty row: nothing to read
		}
		evs = append(evs, Event{ID: *id, TxID: *txid, Topic: *topic, Key: *key, Payload: payload, Created: *created})
	}
	return horizon, evs, rows.Err()
}

// inbox records evs and returns the ones not applied before, in order.
func (r *Runner) inbox(ctx context.Context, tx pgx.Tx, evs []Event) ([]Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	rows, err := tx.Query(ctx, sqlInbox, r.c.Name, ids, r.fence)
	if err != nil {
		return nil, err
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(inserted) == len(evs) {
		return evs, nil
	}
	isNew := make(map[int64]bool, len(inserted))
	for _, id := range inserted {
		isNew[id] = true
	}
	fresh := make([]Event, 0, len(inserted))
	for _, ev := range evs {
		if isNew[ev.ID] {
			fresh = append(fresh, ev)
		}
	}
	return fresh, nil
}

func (r *Runner) apply(ctx context.Context, tx pgx.Tx, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	if r.c.HandleBatch != nil {
		return r.c.HandleBatch(ctx, tx, evs)
	}
	for i, ev := range evs {
		if err := r.c.Handle(ctx, tx, ev); err != nil {
			return &handlerError{index: i, event: ev.ID, err: err}
		}
	}
	return nil
}
