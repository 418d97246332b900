package shortlink

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/clock"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// Drop reasons (the metric's label).
const (
	dropQueueFull   = "queue_full"
	dropWriteFailed = "write_failed"
)

// FaultClicksCommitted is the key the click writer passes to
// faults.AfterCommit once a batch has committed: a test that fails it plays
// a commit whose reply was lost, and the writer retries the batch (SL-04).
const FaultClicksCommitted = "shortlink_clicks"

// maxPendingDropCodes bounds the per-link drop counts held between flushes;
// drops of further links are still counted, in the metrics only
// (fencelab_shortlink_clicks_dropped_unattributed_total).
const maxPendingDropCodes = 10_000

type click struct {
	code string
	at   time.Time
}

// clickRecorder takes clicks from the redirect path and writes them in
// batches, far from it:
//
//   - Record never waits (SL-I3): a full queue drops the click and counts it.
//   - The writers (one per stats connection) own a small pool with short
//     connect, lock and statement timeouts, opened on the stats URL, so a
//     dead or locked stats store costs them retries and drops, and the
//     redirect path nothing.
//   - Each click gets its id before the first attempt; a retried batch
//     re-sends the same ids and ON CONFLICT DO NOTHING keeps one row each
//     (SL-I4).
//   - Drops are counted per link and flushed through the main pool, so the
//     record of a stats outage does not depend on the stats store.
type clickRecorder struct {
	cfg    Config
	main   *pgxpool.Pool
	log    *slog.Logger
	faults *faults.Set
	queue  *clickQueue
	m      *metrics

	mu      sync.Mutex
	pending map[string]int64 // drops per code since the last flush
}

func newClickRecorder(cfg Config, main *pgxpool.Pool, log *slog.Logger, fs *faults.Set, m *metrics) *clickRecorder {
	return &clickRecorder{cfg: cfg, main: main, log: log, faults: fs, m: m,
		queue: newClickQueue(cfg.ClickQueue, cfg.ClickBatch), pending: map[string]int64{}}
}

// Record queues a click without ever blocking the caller.
func (r *clickRecorder) Record(code string, at time.Time) {
	if full, ok := r.queue.put(click{code: code, at: at}); !ok {
		r.drop(r.m.droppedQueueFull, code, 1)
	} else if full != nil {
		// Cannot happen (ready has room for every batch the bound allows);
		// if it did, the batch is counted, never waited for (SL-I3, SL-I4).
		for _, c := range full {
			r.drop(r.m.droppedQueueFull, c.code, 1)
		}
	}
}

// clickQueue is the bounded queue between the redirect path and the
// writers. A click is appended to the batch being filled, under a mutex
// held for the append; a writer hears of a batch once it is full, and
// collects a partial one every ClickInterval. (A channel of clicks woke a
// parked writer — and often an idle OS thread — on every redirect: on a
// busy server that was a good part of a redirect's cost beyond /healthz.)
type clickQueue struct {
	size  int // ClickBatch
	limit int // ClickQueue: clicks queued (filling or ready) at most
	// ready holds full batches; it has room for every full batch limit
	// allows, so handing one over never waits.
	ready chan []click
	free  chan []click // written batches' buffers, for reuse

	mu      sync.Mutex
	filling []click
	queued  int // clicks in filling and in ready
}

func newClickQueue(limit, size int) *clickQueue {
	return &clickQueue{size: size, limit: limit,
		ready: make(chan []click, limit/size+1), free: make(chan []click, limit/size+1)}
}

// put queues c; ok is false when the queue is full. A non-nil full is a
// full batch that found no room in ready (see Record).
func (q *clickQueue) put(c click) (full []click, ok bool) {
	q.mu.Lock()
	if q.queued >= q.limit {
		q.mu.Unlock()
		return nil, false
	}
	if q.filling == nil {
		q.filling = q.buffer()
	}
	q.filling = append(q.filling, c)
	q.queued++
	if len(q.filling) == q.size {
		full, q.filling = q.filling, nil
	}
	q.mu.Unlock()
	if full == nil {
		return nil, true
	}
	select {
	case q.ready <- full:
		return nil, true
	default:
		q.taken(len(full))
		return full, true
	}
}

// taken forgets n clicks a writer took.
func (q *clickQueue) taken(n int) {
	q.mu.Lock()
	q.queued -= n
	q.mu.Unlock()
}

// partial takes the batch being filled, nil if it is empty.
func (q *clickQueue) partial() []click {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.filling
	q.filling = nil
	q.queued -= len(b)
	return b
}

// buffer returns an empty batch buffer, reused when one is free.
func (q *clickQueue) buffer() []click {
	select {
	case b := <-q.free:
		return b[:0]
	default:
		return make([]click, 0, q.size)
	}
}

// recycle offers a written batch's buffer for reuse.
func (q *clickQueue) recycle(b []click) {
	clear(b) // drop the codes' references
	select {
	case q.free <- b[:0]:
	default:
	}
}

// depth is the number of clicks waiting for a writer.
func (q *clickQueue) depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued
}

// drop counts n lost clicks of code (SL-I4) on the metric of their reason
// and for the link's stats.
func (r *clickRecorder) drop(metric prometheus.Counter, code string, n int64) {
	metric.Add(float64(n))
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[code]; !ok && len(r.pending) >= maxPendingDropCodes {
		r.m.dropsUnattributed.Add(float64(n))
		return
	}
	r.pending[code] += n
}

// Run drives the writers and the drop flusher until ctx ends; then the
// writers drain the queue and the flusher records the last drops, each
// within a short grace.
func (r *clickRecorder) Run(ctx context.Context) error {
	stats, err := r.openStatsPool(ctx)
	if err != nil {
		return err
	}
	defer stats.Close()
	collector := pg.NewPoolCollector(stats, "shortlink_stats")
	if r.m.reg.Register(collector) == nil {
		defer r.m.reg.Unregister(collector)
	}

	// One writer per stats connection: while one batch waits on its
	// commit, the next is being filled and sent.
	var writers sync.WaitGroup
	for range r.cfg.StatsMaxConns {
		writers.Go(func() { r.write(ctx, stats) })
	}
	writersDone := make(chan struct{})
	go func() { writers.Wait(); close(writersDone) }()
	r.flushDrops(ctx, writersDone)
	return nil
}

// openStatsPool opens the writer's pool lazily: no connection is made until
// the first batch, so a dead stats store shows up as failed batches (and
// counted drops), not as a writer that cannot start.
func (r *clickRecorder) openStatsPool(ctx context.Context) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(r.cfg.StatsURL)
	if err != nil {
		return nil, err
	}
	ms := strconv.FormatInt(r.cfg.StatsTimeout.Milliseconds(), 10)
	pc.MaxConns = int32(r.cfg.StatsMaxConns)
	pc.ConnConfig.ConnectTimeout = r.cfg.StatsTimeout
	pc.ConnConfig.RuntimeParams["application_name"] = "fencelab-shortlink-stats"
	pc.ConnConfig.RuntimeParams["statement_timeout"] = ms
	pc.ConnConfig.RuntimeParams["lock_timeout"] = ms
	return pgxpool.NewWithConfig(ctx, pc)
}

// write writes full batches as they are handed over and, every
// ClickInterval, the batch being filled, until ctx ends; then it drains
// what is queued.
func (r *clickRecorder) write(ctx context.Context, stats *pgxpool.Pool) {
	rows := &clickRows{}
	tick := time.NewTicker(r.cfg.ClickInterval)
	defer tick.Stop()
	for {
		select {
		case b := <-r.queue.ready:
			r.queue.taken(len(b))
			r.writeBatch(ctx, stats, rows, b)
			r.queue.recycle(b)
		case <-tick.C:
			if b := r.queue.partial(); len(b) > 0 {
				r.writeBatch(ctx, stats, rows, b)
				r.queue.recycle(b)
			}
		case <-ctx.Done():
			r.drain(stats, rows)
			return
		}
	}
}

// drain writes what is left in the queue at shutdown, within a grace of
// one batch's attempts; whatever does not make it is counted as dropped.
func (r *clickRecorder) drain(stats *pgxpool.Pool, rows *clickRows) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.cfg.StatsAttempts)*2*r.cfg.StatsTimeout)
	defer cancel()
	for {
		select {
		case b := <-r.queue.ready:
			r.queue.taken(len(b))
			r.writeBatch(ctx, stats, rows, b)
		default:
			if b := r.queue.partial(); len(b) > 0 {
				r.writeBatch(ctx, stats, rows, b)
			}
			return
		}
	}
}

// writeBatch tries a batch up to StatsAttempts times with the same ids;
// after the last failure its clicks are counted as dropped. rows is the
// writer's own, reused from batch to batch.
func (r *clickRecorder) writeBatch(ctx context.Context, stats *pgxpool.Pool, rows *clickRows, batch []click) {
	rows.fill(batch)
	var err error
	for attempt := 1; attempt <= r.cfg.StatsAttempts; attempt++ {
		if attempt > 1 {
			r.m.batchRetries.Inc()
			if !clock.Sleep(ctx, time.Duration(attempt-1)*r.cfg.StatsTimeout/4) {
				break
			}
		}
		if err = r.insertOnce(ctx, stats, rows, attempt > 1); err == nil {
			r.m.written.Add(float64(len(batch)))
			return
		}
	}
	r.log.Warn("shortlink: click batch dropped", "clicks", len(batch), "attempts", r.cfg.StatsAttempts, "err", err)
	for _, c := range batch {
		r.drop(r.m.droppedWriteFailed, c.code, 1)
	}
}

// insertOnce is one attempt; the context bound backs up the server-side
// timeouts when the server cannot even be reached.
func (r *clickRecorder) insertOnce(ctx context.Context, stats *pgxpool.Pool, rows *clickRows, retry bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.StatsTimeout)
	defer cancel()
	if err := insertClicks(ctx, stats, rows, retry); err != nil {
		return err
	}
	// SL-04: a test fails this point to lose the reply of a committed batch.
	return r.faults.Hit(ctx, faults.AfterCommit, FaultClicksCommitted)
}

// flushDrops writes the pending drop counts every ClickInterval until ctx
// ends and the writers are done, then once more. A failed flush is retried
// with the same flush id, so a count that did commit is not added twice.
func (r *clickRecorder) flushDrops(ctx context.Context, writersDone <-chan struct{}) {
	var inflight map[string]int64
	var flushID uuid.UUID
	flush := func(ctx context.Context) {
		if inflight == nil {
			r.mu.Lock()
			if len(r.pending) > 0 {
				inflight, r.pending = r.pending, map[string]int64{}
				flushID = uuid.New()
			}
			r.mu.Unlock()
		}
		if inflight == nil {
			return
		}
		codes := make([]string, 0, len(inflight))
		counts := make([]int64, 0, len(inflight))
		for code, n := range inflight {
			codes, counts = append(codes, code), append(counts, n)
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := insertDrops(ctx, r.main, flushID, codes, counts); err != nil {
			r.log.Warn("shortlink: drop counts not flushed; will retry", "links", len(codes), "err", err)
			return
		}
		inflight = nil
	}
	tick := time.NewTicker(r.cfg.ClickInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if ctx.Err() == nil {
				flush(ctx)
			}
		case <-writersDone:
			// The writers have drained: record what they dropped, with a grace.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for range 2 { // the in-flight flush, then drops counted since
				flush(ctx)
			}
			return
		}
	}
}
