package claim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/pg"
)

// DefaultLease is how long a claim holds a job without a heartbeat. The
// worker pool renews at a third of it.
const DefaultLease = 30 * time.Second

// Options configure a Client.
type Options struct {
	Log *slog.Logger
	// Metrics receives the claim engine's metrics (nil: not registered).
	Metrics prometheus.Registerer
	// Faults arms the engine's pause points (after_claim); nil in production.
	Faults *faults.Set
	// Owner names this process in owner columns and events (default
	// "<host>/<pid>/<random>").
	Owner string
	// Lease is the default lease of a claim (default DefaultLease).
	Lease time.Duration
	// UnknownDelay spreads the resolver's first look at a job marked
	// unknown over [0, UnknownDelay) (default 1s).
	UnknownDelay time.Duration
}

// Client is the claim engine bound to one database: the registry of kinds,
// the fenced writes, recovery, resolution and the worker pool. One per
// process (app.Deps.Jobs); it is safe for concurrent use.
type Client struct {
	pool         *pgxpool.Pool
	log          *slog.Logger
	faults       *faults.Set
	m            *metrics
	owner        string
	lease        time.Duration
	unknownDelay time.Duration

	mu    sync.RWMutex
	kinds map[string]Kind
}

// NewClient returns a Client on pool.
func NewClient(pool *pgxpool.Pool, o Options) *Client {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = fmt.Sprintf("%s/%d/%04x", host, os.Getpid(), rand.N(1<<16))
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.UnknownDelay <= 0 {
		o.UnknownDelay = time.Second
	}
	c := &Client{pool: pool, log: o.Log, faults: o.Faults, owner: o.Owner, lease: o.Lease,
		unknownDelay: o.UnknownDelay, kinds: map[string]Kind{}}
	c.m = newMetrics(o.Metrics, c)
	return c
}

// Owner is the process's default owner name.
func (c *Client) Owner() string { return c.owner }

// Pool is the database the client works on.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_.:-]{0,99}$`)

// Register adds kinds. A kind without a handler, with a malformed name or
// registered twice is a programming error reported here, at start-up.
func (c *Client) Register(kinds ...Kind) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range kinds {
		switch {
		case !kindRE.MatchString(k.Name):
			return fmt.Errorf("%w: kind name %q", ErrInvalid, k.Name)
		case k.Handle == nil:
			return fmt.Errorf("%w: kind %q has no Handle", ErrInvalid, k.Name)
		case k.Every < 0 || (k.Every > 0 && k.Every < time.Second):
			return fmt.Errorf("%w: kind %q: Every must be at least 1s", ErrInvalid, k.Name)
		case k.MaxAttempts < 0:
			return fmt.Errorf("%w: kind %q: negative MaxAttempts", ErrInvalid, k.Name)
		}
		if _, dup := c.kinds[k.Name]; dup {
			return fmt.Errorf("%w: kind %q registered twice", ErrInvalid, k.Name)
		}
		c.kinds[k.Name] = k
	}
	return nil
}

// Kind returns a registered kind.
func (c *Client) Kind(name string) (Kind, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, ok := c.kinds[name]
	return k, ok
}

// KindNames lists the registered kinds, sorted.
func (c *Client) KindNames() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.kinds))
	for n := range c.kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// rerunnable lists the registered kinds without side effects: the only
// ones RecoverExpired sends straight back to ready. An unregistered kind is
// treated as side-effecting, the safe default.
func (c *Client) rerunnable() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for n, k := range c.kinds {
		if !k.SideEffects {
			out = append(out, n)
		}
	}
	return out
}

// kept lists the registered kinds whose finished jobs claim.purge keeps.
func (c *Client) kept() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := []string{}
	for n, k := range c.kinds {
		if k.KeepFinished {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Enqueue inserts a job in db — the pool, or the caller's transaction so the
// job exists exactly when the business write that asked for it commits.
// It is idempotent on (Kind, BusinessKey): a repeat returns the existing
// job's id with created == false and changes nothing.
func (c *Client) Enqueue(ctx context.Context, db pg.Querier, nj NewJob) (id int64, created bool, err error) {
	payload, due, maxAttempts, err := c.prepare(nj)
	if err != nil {
		return 0, false, err
	}
	err = db.QueryRow(ctx, sqlEnqueue, nj.Kind, nj.BusinessKey, payload, due, maxAttempts).Scan(&id, &created)
	if err != nil {
		return 0, false, fmt.Errorf("claim: enqueue %s/%s: %w", nj.Kind, nj.BusinessKey, pg.MapError(err))
	}
	return id, created, nil
}

// EnqueueMany inserts many jobs in one statement (fan-outs, benchmarks);
// duplicates are skipped. It returns how many were new.
func (c *Client) EnqueueMany(ctx context.Context, db pg.Querier, jobs []NewJob) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	kinds := make([]string, len(jobs))
	keys := make([]string, len(jobs))
	payloads := make([]string, len(jobs))
	dues := make([]*time.Time, len(jobs))
	maxes := make([]int32, len(jobs))
	for i, nj := range jobs {
		p, due, m, err := c.prepare(nj)
		if err != nil {
			return 0, err
		}
		kinds[i], keys[i], payloads[i], dues[i], maxes[i] = nj.Kind, nj.BusinessKey, p, due, int32(m)
	}
	var n, notified int
	if err := db.QueryRow(ctx, sqlEnqueueMany, kinds, keys, payloads, dues, maxes).Scan(&n, &notified); err != nil {
		return 0, fmt.Errorf("claim: enqueue many: %w", pg.MapError(err))
	}
	return n, nil
}

func (c *Client) prepare(nj NewJob) (payload string, due *time.Time, maxAttempts int, err error) {
	if !kindRE.MatchString(nj.Kind) {
		return "", nil, 0, fmt.Errorf("%w: kind %q", ErrInvalid, nj.Kind)
	}
	if nj.BusinessKey == "" || len(nj.BusinessKey) > MaxBusinessKeyLen {
		return "", nil, 0, fmt.Errorf("%w: business key must be 1..%d bytes", ErrInvalid, MaxBusinessKeyLen)
	}
	payload = "{}"
	if nj.Payload != nil {
		b, err := json.Marshal(nj.Payload)
		if err != nil {
			return "", nil, 0, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
		}
		payload = string(b)
	}
	if len(payload) > MaxPayloadBytes {
		return "", nil, 0, fmt.Errorf("%w: payload exceeds %d bytes", ErrInvalid, MaxPayloadBytes)
	}
	if !nj.DueAt.IsZero() {
		d := nj.DueAt
		due = &d
	}
	maxAttempts = nj.MaxAttempts
	if maxAttempts == 0 {
		if k, ok := c.Kind(nj.Kind); ok && k.MaxAttempts > 0 {
			maxAttempts = k.MaxAttempts
		} else {
			maxAttempts = DefaultMaxAttempts
		}
	}
	if maxAttempts < 1 || maxAttempts > 1000 {
		return "", nil, 0, fmt.Errorf("%w: max attempts must be 1..1000", ErrInvalid)
	}
	return payload, due, maxAttempts, nil
}

// ClaimParams select what Claim takes.
type ClaimParams struct {
	Owner string        // default: the client's owner
	Kinds []string      // default: every registered kind
	Limit int           // jobs per statement (default 1)
	Lease time.Duration // default: the client's lease

	after position // where the scan starts (sqlClaim); zero: the head
}

// position is a row's place in job_ready_idx's order.
type position struct {
	due, created time.Time
	id           int64
}

// scanFromHead is below every job's position: a claim from it scans
// job_ready_idx from its head (due_at is never before year 1).
var scanFromHead = position{due: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), created: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}

func (p position) args() (time.Time, time.Time, int64) {
	if p.due.IsZero() {
		p = scanFromHead
	}
	return p.due, p.created, p.id
}

func (p position) before(q position) bool {
	if !p.due.Equal(q.due) {
		return p.due.Before(q.due)
	}
	if !p.created.Equal(q.created) {
		return p.created.Before(q.created)
	}
	return p.id < q.id
}

// Claim takes up to p.Limit due ready jobs in one statement (see sqlClaim)
// and returns them running under p.Owner with their new fences. When one of
// the kinds has an OnClaim hook the statement and the hooks share one
// transaction, so a hook's check and the claim commit (or not) together.
func (c *Client) Claim(ctx context.Context, p ClaimParams) ([]*Job, error) {
	if p.Owner == "" {
		p.Owner = c.owner
	}
	if len(p.Kinds) == 0 {
		p.Kinds = c.KindNames()
	}
	if p.Limit <= 0 {
		p.Limit = 1
	}
	if p.Lease <= 0 {
		p.Lease = c.lease
	}
	hooks := map[string]Kind{}
	for _, name := range p.Kinds {
		if k, ok := c.Kind(name); ok && k.OnClaim != nil {
			hooks[name] = k
		}
	}
	var jobs []*Job
	var err error
	if len(hooks) == 0 {
		jobs, err = claimIn(ctx, c.pool, p)
	} else {
		err = pg.InTx(ctx, c.pool, func(tx pgx.Tx) error {
			all, err := claimIn(ctx, tx, p)
			if err != nil {
				return err
			}
			jobs = all[:0]
			for _, j := range all {
				k, ok := hooks[j.Kind]
				if !ok {
					jobs = append(jobs, j)
					continue
				}
				herr := k.OnClaim(ctx, tx, *j)
				var ce cancelErr
				switch {
				case herr == nil:
					jobs = append(jobs, j)
				case errors.As(herr, &ce):
					if _, err := tx.Exec(ctx, sqlCancel, j.ID, j.Fence, j.Owner, ce.reason); err != nil {
						return err
					}
					c.m.finished(j.Kind, "cancelled")
				default:
					return fmt.Errorf("OnClaim %s job %d: %w", j.Kind, j.ID, herr)
				}
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("claim: claim: %w", pg.MapError(err))
	}
	for _, j := range jobs {
		c.m.claims.WithLabelValues(j.Kind).Inc()
	}
	return jobs, nil
}

// claimStmts are sqlClaim with @bucket = 1, 2, 4, … 2³⁰ written in,
// rewritten to $n once (pg.MustNamed): a claim runs claimStmt(limit).
var claimStmts = func() (out [31]pg.Named) {
	for k := range out {
		out[k] = pg.MustNamed(strings.Replace(sqlClaim, "@bucket", strconv.Itoa(1<<k), 1))
	}
	return out
}()

// claimStmt is the claim statement for up to limit jobs: the one whose
// bucket is the least power of two ≥ limit (see sqlClaim).
func claimStmt(limit int) pg.Named {
	return claimStmts[min(bits.Len(uint(max(limit, 1)-1)), len(claimStmts)-1)]
}

// claimQuery is the claim for p: its bucket's text and its parameters in
// that text's order.
func claimQuery(p ClaimParams) (string, []any) {
	due, created, id := p.after.args()
	stmt := claimStmt(p.Limit)
	return stmt.SQL, stmt.Args(pgx.NamedArgs{
		"kinds": p.Kinds, "limit": p.Limit, "owner": p.Owner, "lease_us": p.Lease.Microseconds(),
		"after_due": due, "after_created": created, "after_id": id,
	})
}

func claimIn(ctx context.Context, db pg.Querier, p ClaimParams) ([]*Job, error) {
	sql, args := claimQuery(p)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return scanJobs(rows)
}

func scanJobs(rows pgx.Rows) ([]*Job, error) {
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

func scanJob(row pgx.Row) (*Job, error) {
	var j Job
	var state string
	// jsonb into []byte is a copy of the server's text; into a
	// json.RawMessage, pgx would run json.Unmarshal over every payload.
	var payload, result []byte
	err := row.Scan(&j.ID, &j.Kind, &j.BusinessKey, &state, &payload, &j.DueAt, &j.CreatedAt, &j.UpdatedAt,
		&j.Attempts, &j.MaxAttempts, &j.Owner, &j.Fence, &j.LeaseUntil, &j.LastError, &result)
	j.State, j.Payload, j.Result = State(state), payload, result
	return &j, err
}

// Complete finishes a held job as succeeded with result (nil: none). It is
// fenced: if the job is no longer running under this owner and fence with a
// live lease, nothing changes, a rejected_stale event is recorded and the
// error is ErrStaleFence.
func (c *Client) Complete(ctx context.Context, j *Job, result any) error {
	res, err := marshalResult(result)
	if err != nil {
		return err
	}
	stale, err := c.completeMany(ctx, c.pool, j.Owner, []completion{{job: j, result: res}}, true)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		return staleErr(j)
	}
	j.finished = true
	return nil
}

// CompleteTx is Complete inside the caller's transaction, so a module's
// business write and the job's completion commit together or not at all.
// On ErrStaleFence the caller must roll back (pg.InTx does when the error is
// returned); the rejected_stale event is recorded on a separate connection so
// the rollback does not erase it.
func (c *Client) CompleteTx(ctx context.Context, tx pgx.Tx, j *Job, result any) error {
	res, err := marshalResult(result)
	if err != nil {
		return err
	}
	stale, err := c.completeMany(ctx, tx, j.Owner, []completion{{job: j, result: res}}, false)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		c.rejectStale(ctx, j, "complete refused")
		return staleErr(j)
	}
	j.finished = true
	return nil
}

func marshalResult(v any) (*string, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(r) == 0 {
			return nil, nil
		}
		s := string(r)
		return &s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: result: %v", ErrInvalid, err)
	}
	s := string(b)
	return &s, nil
}

type completion struct {
	job    *Job
	result *string
}

// completeArgs orders a batch by id (concurrent batches lock rows in one
// order, so they cannot deadlock each other) and builds sqlComplete's
// arguments: the ids, the jsonb object {"<id>": [fence, result position]}
// and the results.
func completeArgs(batch []completion) (ids []int64, fences string, results []*string) {
	slices.SortFunc(batch, func(a, b completion) int { return cmp.Compare(a.job.ID, b.job.ID) })
	ids = make([]int64, len(batch))
	results = make([]*string, len(batch))
	buf := make([]byte, 0, 32*len(batch)+2)
	buf = append(buf, '{')
	for i, b := range batch {
		ids[i], results[i] = b.job.ID, b.result
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = strconv.AppendInt(buf, b.job.ID, 10)
		buf = append(buf, `":[`...)
		buf = strconv.AppendInt(buf, b.job.Fence, 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, int64(i+1), 10)
		buf = append(buf, ']')
	}
	buf = append(buf, '}')
	return ids, string(buf), results
}

// fenceMap is {"<id>": fence} for sqlHeartbeat.
func fenceMap(jobs []*Job) string {
	buf := make([]byte, 0, 24*len(jobs)+2)
	buf = append(buf, '{')
	for i, j := range jobs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = strconv.AppendInt(buf, j.ID, 10)
		buf = append(buf, `":`...)
		buf = strconv.AppendInt(buf, j.Fence, 10)
	}
	buf = append(buf, '}')
	return string(buf)
}

// scanCompleted reads sqlComplete's rows: the ids whose fenced update matched.
func scanCompleted(rows pgx.Rows, done map[int64]bool) error {
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		done[id] = true
	}
	return rows.Err()
}

// settleCompleted counts a committed batch's outcomes and returns the jobs
// whose fence no longer matched.
func (c *Client) settleCompleted(batch []completion, done map[int64]bool) (stale []*Job) {
	succeeded := perKind{}
	for _, b := range batch {
		if done[b.job.ID] {
			succeeded.add(b.job.Kind)
		} else {
			stale = append(stale, b.job)
			c.m.stale.WithLabelValues(b.job.Kind).Inc()
		}
	}
	succeeded.addTo(c.m.outcomes, "succeeded")
	return stale
}

// perKind counts a batch's jobs by kind, so that a counter's labels are
// hashed once per kind and batch, not once per job (a batch is usually of
// one kind).
type perKind map[string]int

func (p perKind) add(kind string) { p[kind]++ }

// addTo adds each kind's count to vec, labelled (kind, more...).
func (p perKind) addTo(vec *prometheus.CounterVec, more ...string) {
	for kind, n := range p {
		vec.WithLabelValues(append([]string{kind}, more...)...).Add(float64(n))
	}
}

// completeMany runs sqlComplete for one owner's batch and returns the jobs
// whose fence no longer matched. Deadlocks between concurrent batches (rows
// locked in different orders) are retried: the statement is all-or-nothing.
func (c *Client) completeMany(ctx context.Context, db pg.Querier, owner string, batch []completion, recordStale bool) (stale []*Job, err error) {
	ids, fences, results := completeArgs(batch)
	done := make(map[int64]bool, len(batch))
	for attempt := 0; ; attempt++ {
		clear(done)
		err = func() error {
			rows, err := db.Query(ctx, sqlComplete, ids, fences, results, owner, recordStale)
			if err != nil {
				return err
			}
			return scanCompleted(rows, done)
		}()
		err = pg.MapError(err)
		if _, inTx := db.(pgx.Tx); err != nil && !inTx && attempt < 5 && (errors.Is(err, pg.ErrDeadlock) || errors.Is(err, pg.ErrSerialization)) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("claim: complete: %w", err)
		}
		break
	}
	return c.settleCompleted(batch, done), nil
}

// completeAndClaim is the worker pool's round trip: sqlComplete for the
// batch of successes (if any) and sqlClaim for up to cp.Limit jobs (if
// cp.Limit > 0), sent together as one pgx batch. A batch ends with a
// single Sync, so the two statements run in one implicit transaction: one
// round trip and one commit (one WAL flush) where there were two of each.
// Both statements are exactly the ones used alone — every completion is
// fenced (CLAIM-I4), every claim raises the fence and writes its claimed
// event (CLAIM-I3) — and nothing is acted on before the commit is
// confirmed: the claimed jobs are returned, and the completions counted,
// only once Close has seen the transaction end. On any error neither
// happened (the transaction is all-or-nothing), unless the connection
// broke after the commit was sent: then the claimed jobs lapse and are
// recovered, and a repeated completion is refused by its fence.
// OnClaim hooks need the claim in a transaction of their own: the pool
// does not use this for kinds that have one.
func (c *Client) completeAndClaim(ctx context.Context, owner string, batch []completion, cp ClaimParams) (stale, jobs []*Job, err error) {
	b := &pgx.Batch{}
	if len(batch) > 0 {
		ids, fences, results := completeArgs(batch)
		b.Queue(sqlComplete, ids, fences, results, owner, true)
	}
	if cp.Limit > 0 {
		sql, args := claimQuery(cp)
		b.Queue(sql, args...)
	}
	if b.Len() == 0 {
		return nil, nil, nil
	}
	done := make(map[int64]bool, len(batch))
	err = func() error {
		br := c.pool.SendBatch(ctx, b)
		defer br.Close()
		if len(batch) > 0 {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if err := scanCompleted(rows, done); err != nil {
				return err
			}
		}
		if cp.Limit > 0 {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if jobs, err = scanJobs(rows); err != nil {
				return err
			}
		}
		return br.Close() // the commit: nothing above counts until it succeeds
	}()
	if err != nil {
		return nil, nil, fmt.Errorf("claim: complete and claim: %w", pg.MapError(err))
	}
	claimed := perKind{}
	for _, j := range jobs {
		claimed.add(j.Kind)
	}
	claimed.addTo(c.m.claims)
	return c.settleCompleted(batch, done), jobs, nil
}

// rejectStale records a refused write on the client's own pool.
func (c *Client) rejectStale(ctx context.Context, j *Job, detail string) {
	c.m.stale.WithLabelValues(j.Kind).Inc()
	if _, err := c.pool.Exec(context.WithoutCancel(ctx), sqlRejectStale, j.ID, j.Fence, j.Owner, detail); err != nil {
		c.log.Warn("claim: cannot record rejected_stale", "job", j.ID, "err", err)
	}
}

// staleErr is the ErrStaleFence a fenced write on j answers.
func staleErr(j *Job) error {
	return fmt.Errorf("%w (job %d, fence %d, owner %s)", ErrStaleFence, j.ID, j.Fence, j.Owner)
}

// refused answers a fenced write (fail, mark unknown) that found j no
// longer held. With recordStale the statement itself recorded the
// rejected_stale event and only the metric is left to count; inside the
// caller's transaction, whose rollback would erase it, the event is
// recorded on the client's own pool (rejectStale).
func (c *Client) refused(ctx context.Context, j *Job, recordStale bool, detail string) error {
	if recordStale {
		c.m.stale.WithLabelValues(j.Kind).Inc()
	} else {
		c.rejectStale(ctx, j, detail)
	}
	return staleErr(j)
}

// Fail ends a held attempt with cause: back to ready after the kind's
// backoff, or failed when cause is Permanent or the job has used
// max_attempts claims. Fenced like Complete.
func (c *Client) Fail(ctx context.Context, j *Job, cause error) error {
	return c.fail(ctx, c.pool, j, cause, true)
}

// FailTx is Fail inside the caller's transaction (see CompleteTx).
func (c *Client) FailTx(ctx context.Context, tx pgx.Tx, j *Job, cause error) error {
	return c.fail(ctx, tx, j, cause, false)
}

// failStmt is sqlFail rewritten to $n once (pg.MustNamed).
var failStmt = pg.MustNamed(sqlFail)

func (c *Client) fail(ctx context.Context, db pg.Querier, j *Job, cause error, recordStale bool) error {
	k, _ := c.Kind(j.Kind)
	var perm permanentErr
	permanent := errors.As(cause, &perm)
	delay := k.backoff(j.Attempts)
	msg := truncate(errString(cause), 2000)
	var state string
	err := db.QueryRow(ctx, failStmt.SQL, failStmt.Args(pgx.NamedArgs{
		"id":           j.ID,
		"fence":        j.Fence,
		"owner":        j.Owner,
		"error":        msg,
		"delay_us":     delay.Microseconds(),
		"permanent":    permanent,
		"record_stale": recordStale,
	})...).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.refused(ctx, j, recordStale, "fail: "+msg)
	}
	if err != nil {
		return fmt.Errorf("claim: fail job %d: %w", j.ID, pg.MapError(err))
	}
	j.finished = true
	if state == string(StateFailed) {
		c.m.finished(j.Kind, "failed")
	} else {
		c.m.finished(j.Kind, "retry")
	}
	return nil
}

// MarkUnknown records that the job's external effect may or may not have
// happened (a timeout after sending). The job waits for the resolver, which
// asks the kind's authoritative query. Fenced like Complete.
func (c *Client) MarkUnknown(ctx context.Context, j *Job, cause error) error {
	return c.markUnknown(ctx, c.pool, j, cause, true)
}

// MarkUnknownTx is MarkUnknown inside the caller's transaction.
func (c *Client) MarkUnknownTx(ctx context.Context, tx pgx.Tx, j *Job, cause error) error {
	return c.markUnknown(ctx, tx, j, cause, false)
}

// markUnknownStmt is sqlMarkUnknown rewritten to $n once (pg.MustNamed).
var markUnknownStmt = pg.MustNamed(sqlMarkUnknown)

func (c *Client) markUnknown(ctx context.Context, db pg.Querier, j *Job, cause error, recordStale bool) error {
	msg := truncate(errString(cause), 2000)
	delay := time.Duration(rand.Int64N(int64(c.unknownDelay)))
	var id int64
	err := db.QueryRow(ctx, markUnknownStmt.SQL, markUnknownStmt.Args(pgx.NamedArgs{
		"id":           j.ID,
		"fence":        j.Fence,
		"owner":        j.Owner,
		"error":        msg,
		"delay_us":     delay.Microseconds(),
		"record_stale": recordStale,
	})...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.refused(ctx, j, recordStale, "unknown: "+msg)
	}
	if err != nil {
		return fmt.Errorf("claim: mark unknown job %d: %w", j.ID, pg.MapError(err))
	}
	j.finished = true
	c.m.unknowns.WithLabelValues(j.Kind).Inc()
	c.m.finished(j.Kind, "unknown")
	return nil
}

// Heartbeat extends a held job's lease by the client's lease. It fails with
// ErrStaleFence (and records heartbeat_lost) when the job is no longer held:
// the holder must stop, which is what the worker pool does by cancelling the
// handler's context.
func (c *Client) Heartbeat(ctx context.Context, j *Job) error {
	lost, err := c.heartbeatMany(ctx, j.Owner, []*Job{j}, c.lease)
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return fmt.Errorf("%w (job %d, fence %d): heartbeat lost", ErrStaleFence, j.ID, j.Fence)
	}
	return nil
}

func (c *Client) heartbeatMany(ctx context.Context, owner string, jobs []*Job, lease time.Duration) (lost []*Job, err error) {
	ids := make([]int64, len(jobs))
	fences := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i], fences[i] = j.ID, j.Fence
	}
	rows, err := c.pool.Query(ctx, sqlHeartbeat, ids, fences, owner, lease.Microseconds(), fenceMap(jobs))
	if err != nil {
		return nil, fmt.Errorf("claim: heartbeat: %w", pg.MapError(err))
	}
	gone := make(map[int64]bool)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		gone[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: heartbeat: %w", pg.MapError(err))
	}
	for _, j := range jobs {
		if gone[j.ID] {
			lost = append(lost, j)
			c.m.heartbeatLost.WithLabelValues(j.Kind).Inc()
		}
	}
	return lost, nil
}

// Execute runs a claimed job's handler and applies its outcome the way the
// worker pool does (complete, retry or fail, unknown), returning the error of
// that fenced write — ErrStaleFence when the job was taken away meanwhile.
// It is the pool's unit of work, exposed for experiments and tools that
// drive one job by hand.
func (c *Client) Execute(ctx context.Context, j *Job) error {
	herr := c.handle(ctx, j)
	return c.finish(context.WithoutCancel(ctx), j, herr)
}

func (c *Client) handle(ctx context.Context, j *Job) (err error) {
	k, ok := c.Kind(j.Kind)
	if !ok {
		return Permanent(fmt.Errorf("no handler registered for kind %q", j.Kind))
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return k.Handle(ctx, j)
}

// finish applies a handler's outcome one job at a time (the pool batches
// successes instead).
func (c *Client) finish(ctx context.Context, j *Job, herr error) error {
	switch {
	case j.finished:
		return nil
	case herr == nil:
		return c.Complete(ctx, j, j.result)
	case IsUnknown(herr):
		return c.MarkUnknown(ctx, j, herr)
	default:
		return c.Fail(ctx, j, herr)
	}
}

// Get returns a job and (up to limit of) its events, oldest first.
func (c *Client) Get(ctx context.Context, id int64, limit int) (*Job, []Event, error) {
	j, err := scanJob(c.pool.QueryRow(ctx, sqlGetJob, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("claim: get job %d: %w", id, pg.MapError(err))
	}
	rows, err := c.pool.Query(ctx, sqlJobEvents, id, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: job events %d: %w", id, pg.MapError(err))
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var st string
		err := r.Scan(&e.ID, &e.JobID, &e.Event, &e.Fence, &e.Owner, &st, &e.At, &e.Detail)
		e.State = State(st)
		return e, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim: job events %d: %w", id, pg.MapError(err))
	}
	return j, events, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// hasClaimHooks tells whether one of kinds has an OnClaim hook.
func (c *Client) hasClaimHooks(kinds []string) bool {
	for _, name := range kinds {
		if k, ok := c.Kind(name); ok && k.OnClaim != nil {
			return true
		}
	}
	return false
}
