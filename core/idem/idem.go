// Package idem implements the IETF "Idempotency-Key" semantics the way
// Stripe practises them, on PostgreSQL (chapter 3).
//
// A route opts in in its route table, and its handler wraps the effect:
//
//	e.POST("/points/accounts/:id/debits", h.debit, auth.Require(httpx.RoleUser), keys.Require("points.debit"))
//
//	func (h *handlers) debit(c echo.Context) error {
//		var req debitRequest
//		if err := httpx.Bind(c, &req); err != nil {
//			return err // validation failures are not recorded: the client may fix the body and reuse the key
//		}
//		return idem.Handle(c, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
//			txn, err := h.svc.Debit(ctx, tx, httpx.PrincipalOf(c).Subject, req)
//			if err != nil {
//				return 0, nil, err // a 4xx sentinel (insufficient_balance) is recorded and replayed
//			}
//			return http.StatusCreated, txn, nil
//		})
//	}
//
// The protocol, per (scope, subject, key):
//
//  1. The middleware validates the key (missing → 400
//     idempotency_key_missing; malformed → 400 idempotency_key_invalid),
//     reads the body and fingerprints it: SHA-256 over method, concrete
//     path and canonical JSON body.
//  2. Handle claims the record in its own short transaction, committed
//     before any effect, so a concurrent duplicate sees it: the first
//     request inserts it in flight with a lock expiry and a fence; a retry
//     after the lock expired takes it over with a new fence.
//  3. The effect runs in a second transaction, which also stores the
//     final status and body — conditional on the fence. A request that was
//     taken over while it stalled finds its fence gone and its whole
//     transaction, effect included, rolls back (IDEM-I1).
//  4. Anyone else gets: the stored response byte for byte with
//     Idempotent-Replayed: true (same fingerprint, finished); 422
//     idempotency_key_reused (other fingerprint); 409
//     idempotency_key_in_flight with Retry-After (still running).
//
// A business rejection (fn returns an error that maps to a 4xx, such as
// 409 insufficient_balance) is recorded and replayed like a success, with
// the effect transaction rolled back. An unexpected error (5xx, a dropped
// connection) rolls back and releases the key, so the client may retry.
package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// DefaultLockTTL is how long an in-flight record blocks its key before a
// retry may take it over. It must exceed the slowest legitimate request:
// a request still running after it may be fenced out and rolled back.
const DefaultLockTTL = 15 * time.Second

// Fault points (armed by tests; no-ops otherwise). The key is the
// idempotency key.
const (
	// PointBeforeEffect: the record is claimed and committed; the effect
	// transaction has not begun.
	PointBeforeEffect = "idem.before_effect"
	// PointBeforeFinish (= faults.BeforeCommit): the effect ran inside its
	// transaction; the response is about to be stored under the fence.
	PointBeforeFinish = faults.BeforeCommit
	// PointAfterCommit (= faults.AfterCommit): the effect and its response
	// are committed; the response has not been written. A pause here until
	// the client gives up is "the response was lost": its retry must get
	// the replay. An error returned here is sent instead of the response.
	PointAfterCommit = faults.AfterCommit
)

// Options configure Keys: core's one constructor shape is a type, its
// Options struct and New<Type>(dependencies, Options) (claim.NewClient,
// outbox.NewRunner, httpx.NewLimiter).
type Options struct {
	LockTTL time.Duration // default DefaultLockTTL
	Faults  *faults.Set   // nil in production
	// Metrics receives the store's series (nil: counted, not registered);
	// the stores of one process share them.
	Metrics prometheus.Registerer
	// Presence is the process's presence session (the stores of one
	// process share it). Records claimed through it name it as their
	// owner, and a retry takes them over as soon as it is gone. nil: no
	// owner, a key is freed by its lock expiry alone.
	Presence *Presence
}

// Keys is the idempotency-key store a module's routes use.
type Keys struct {
	pool    *pgxpool.Pool
	lockTTL time.Duration
	faults  *faults.Set
	m       *metrics
	owner   *Presence
}

// NewKeys returns the store over pool.
func NewKeys(pool *pgxpool.Pool, c Options) *Keys {
	if c.LockTTL <= 0 {
		c.LockTTL = DefaultLockTTL
	}
	return &Keys{pool: pool, lockTTL: c.LockTTL, faults: c.Faults, m: newMetrics(c.Metrics), owner: c.Presence}
}

// Func is an idempotent effect. It runs inside the transaction that also
// stores its response, and returns the status and body to send (a
// *httpx.Problem body is sent as problem+json). Returning an error whose
// problem is a 4xx records and replays that rejection; any other error
// rolls back and releases the key.
type Func func(ctx context.Context, tx pgx.Tx) (status int, body any, err error)

var scopeRE = regexp.MustCompile(`^[a-z][a-z0-9_.:-]{0,63}$`)

// Require is the route middleware for an endpoint whose effect must not
// happen twice: a request without Idempotency-Key is a 400. Mount it after
// the auth middleware: keys are scoped per verified subject.
func (k *Keys) Require(scope string) echo.MiddlewareFunc { return k.middleware(scope, true) }

// Optional is Require for endpoints where the key is recommended but not
// required: without one, Handle runs the effect in a plain transaction.
func (k *Keys) Optional(scope string) echo.MiddlewareFunc { return k.middleware(scope, false) }

const ctxKey = "fencelab.idem"

// request is what the middleware hands to Handle.
type request struct {
	keys        *Keys
	scope       string
	subject     string
	key         string // "" on an Optional route called without a key
	fingerprint []byte
}

func (k *Keys) middleware(scope string, required bool) echo.MiddlewareFunc {
	if !scopeRE.MatchString(scope) {
		panic(fmt.Sprintf("idem: invalid scope %q", scope)) // a wiring mistake, seen at start-up
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := &request{keys: k, scope: scope}
			c.Set(ctxKey, r)
			values := c.Request().Header.Values(Header)
			if len(values) > 1 {
				// Which one would be "the" key? Using the first lets a retry
				// that sends the second make a second effect.
				return httpx.BadRequest("idempotency_key_invalid", "send exactly one %s header", Header)
			}
			raw := c.Request().Header.Get(Header)
			if raw == "" {
				if required {
					return httpx.BadRequest("idempotency_key_missing", "this endpoint requires an %s header", Header)
				}
				return next(c)
			}
			key, p := parseKey(raw)
			if p != nil {
				return p
			}
			// Keys are per subject: two users may pick the same key, and
			// one user cannot replay (or block) another's response.
			r.subject = httpx.PrincipalOf(c).Subject
			if r.subject == "" {
				return errors.New("idem: route has no verified principal; mount auth before idem")
			}
			body, err := readBody(c)
			if err != nil {
				return err
			}
			r.key = key
			r.fingerprint = fingerprint(c.Request().Method, c.Request().URL, body)
			return next(c)
		}
	}
}

// KeyOf returns the request's validated idempotency key ("" on an Optional
// route called without one). Effects that keep the key next to their own
// rows (a unique (client, key) constraint, as the first line of defence)
// read it here.
func KeyOf(c echo.Context) string {
	if r, ok := c.Get(ctxKey).(*request); ok {
		return r.key
	}
	return ""
}

// Handle runs fn at most once per idempotency key and answers the request:
// with fn's response the first time, and with the recorded one afterwards.
func Handle(c echo.Context, fn Func) error {
	r, ok := c.Get(ctxKey).(*request)
	if !ok {
		return errors.New("idem: Handle on a route without the idem middleware")
	}
	if r.key == "" {
		return r.keys.plain(c, fn)
	}
	return r.keys.handle(c, r, fn)
}

// errFenceLost: the record was taken over (or released) while this
// request ran; it must not finish.
var errFenceLost = errors.New("idem: fence lost")

// stepTimeout bounds the claim and the release, which run on a context the
// client cannot cancel.
const stepTimeout = 5 * time.Second

func (k *Keys) handle(c echo.Context, r *request, fn Func) error {
	ctx := c.Request().Context()
	// At most a few rounds: each one either claims the record or finds it
	// in a state that answers the request. A record can vanish between the
	// failed claim and the read (released or purged), hence the loop.
	for range 3 {
		// The claim runs on a context the client cannot cancel: a client
		// that hangs up while the claim's COMMIT is on its way would
		// otherwise see an error for a claim that did commit, and nobody
		// would release it — its key would answer 409 in flight to every
		// retry until the lock expired.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
		fence, claimed, err := k.claim(cctx, r)
		cancel()
		if err != nil {
			return err
		}
		if claimed && ctx.Err() != nil {
			// Claimed for a client that is gone: give the key back now.
			r.count("released")
			k.release(ctx, r, fence)
			return ctx.Err()
		}
		if claimed {
			return k.execute(c, r, fence, fn)
		}
		done, err := k.answerExisting(c, r)
		if done || err != nil {
			return err
		}
	}
	r.count("in_flight")
	return inFlight()
}

// claim inserts or takes over the record in its own transaction. The
// transaction is one pipelined round trip (BEGIN, SET LOCAL, the upsert,
// COMMIT in one batch): it sits in front of every effect, so its latency is
// paid by every request. Should the upsert fail, the server skips the rest
// of the batch and pgxpool discards the connection left in the aborted
// transaction rather than reuse it.
func (k *Keys) claim(ctx context.Context, r *request) (fence int64, claimed bool, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlAsyncCommit)
	var (
		takeovers    int
		ownerPID     *int32
		ownerStarted *time.Time
	)
	if o := k.owner.Owner(); o != nil {
		ownerPID, ownerStarted = &o.PID, &o.Started
	}
	b.Queue(sqlBegin, r.scope, r.subject, r.key, r.fingerprint, k.lockTTL.Milliseconds(), ownerPID, ownerStarted).QueryRow(func(row pgx.Row) error {
		switch err := row.Scan(&fence, &takeovers); {
		case errors.Is(pg.MapError(err), pg.ErrNotFound):
			return nil // someone else's live record: not ours to claim
		case err != nil:
			return err
		}
		claimed = true
		return nil
	})
	b.Queue("COMMIT")
	if err := k.pool.SendBatch(ctx, b).Close(); err != nil {
		return 0, false, fmt.Errorf("idem: claim %s: %w", r.scope, pg.MapError(err))
	}
	if claimed && takeovers > 0 {
		r.count("takeover")
	}
	return fence, claimed, nil
}

// record is a stored idempotency record as lookup reads it.
type record struct {
	fingerprint []byte
	state       string
	lockLeft    time.Duration
	resp        response
}

// answerExisting answers from a record the claim could not take. done is
// false when there is nothing to answer from (the record vanished, or its
// lock expired meanwhile) and the caller should claim again.
func (k *Keys) answerExisting(c echo.Context, r *request) (done bool, err error) {
	rec, found, err := k.lookup(c.Request().Context(), r)
	if err != nil || !found {
		return false, err
	}
	switch {
	case string(rec.fingerprint) != string(r.fingerprint):
		r.count("reused")
		return true, httpx.Invalid("idempotency_key_reused",
			"this %s was already used with a different request (method, path or body)", Header)
	case rec.state == "done":
		r.count("replayed")
		return true, write(c, rec.resp, true)
	case rec.lockLeft > 0:
		r.count("in_flight")
		return true, inFlight()
	}
	return false, nil // in flight with an expired lock: take it over
}

func inFlight() *httpx.Problem {
	p := httpx.Conflict("idempotency_key_in_flight",
		"a request with this %s is still being processed; retry later", Header)
	p.RetryAfter = 1
	return p
}

func (k *Keys) lookup(ctx context.Context, r *request) (record, bool, error) {
	var (
		rec        record
		status     *int
		ct         *string
		lockLeftMS int64
	)
	err := k.pool.QueryRow(ctx, sqlLookup, r.scope, r.subject, r.key).Scan(
		&rec.fingerprint, &rec.state, &lockLeftMS, &status, &ct, &rec.resp.body)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("idem: lookup %s: %w", r.scope, err)
	}
	rec.lockLeft = time.Duration(lockLeftMS) * time.Millisecond
	if status != nil {
		rec.resp.status = *status
	}
	if ct != nil {
		rec.resp.contentType = *ct
	}
	return rec, true, nil
}

// execute runs the effect under the fence it claimed.
func (k *Keys) execute(c echo.Context, r *request, fence int64, fn Func) error {
	ctx := c.Request().Context()
	if err := k.faults.Hit(ctx, PointBeforeEffect, r.key); err != nil {
		k.release(ctx, r, fence)
		return err
	}
	// The effect transaction is pipelined (pg.InPipelinedTx): BEGIN travels
	// with the effect's first statement, and statements the effect defers
	// (its outbox event) travel with the finish and the COMMIT — one round
	// trip for the whole tail, the finish refusing if the fence is gone.
	var resp response
	err := pg.InPipelinedTx(ctx, k.pool, func(tx *pg.PipeTx) error {
		status, body, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		if resp, err = render(c, status, body); err != nil {
			return err
		}
		if err := k.faults.Hit(ctx, PointBeforeFinish, r.key); err != nil {
			return err
		}
		finish(tx, r, fence, resp)
		return nil
	})
	if pg.Refused(err, fenceLostMarker) {
		err = errFenceLost
	}
	if p := rejection(c, err); p != nil {
		// A business answer: the effect rolled back with its transaction;
		// record the answer (still under the fence) so a retry gets it too.
		resp = response{status: p.Status, contentType: httpx.ProblemContentType, body: httpx.ProblemDocument(c, p)}
		err = pg.InPipelinedTx(ctx, k.pool, func(tx *pg.PipeTx) error {
			finish(tx, r, fence, resp)
			return nil
		})
	}
	if pg.Refused(err, fenceLostMarker) {
		err = errFenceLost
	}
	switch {
	case err == nil:
		r.count("first")
		if err := k.faults.Hit(ctx, PointAfterCommit, r.key); err != nil {
			return err
		}
		return write(c, resp, false)
	case errors.Is(err, errFenceLost):
		// Taken over while we ran: our effect rolled back. The client gets
		// whatever the record says now (typically the new owner's answer).
		r.count("fence_refused")
		if done, aerr := k.answerExisting(c, r); done || aerr != nil {
			return aerr
		}
		return inFlight()
	default:
		r.count("released")
		k.release(ctx, r, fence)
		return err
	}
}

// rejection returns the problem of a business rejection: an error from fn
// that maps to a 4xx. Context ends, 5xx and unmapped errors are not
// rejections: they release the key instead.
func rejection(c echo.Context, err error) *httpx.Problem {
	ctx := c.Request().Context()
	if err == nil || errors.Is(err, errFenceLost) || ctx.Err() != nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	p := httpx.ProblemOf(c, err) // the same table the error handler answers with
	if p.Status < 400 || p.Status >= 500 {
		return nil
	}
	return p
}

// finish stores resp under the fence with the transaction's COMMIT
// (sqlFinish); the COMMIT fails if the fence is gone.
func finish(tx *pg.PipeTx, r *request, fence int64, resp response) {
	tx.Defer(finishStmt.SQL, finishStmt.Args(pgx.NamedArgs{
		"scope":        r.scope,
		"subject":      r.subject,
		"key":          r.key,
		"fence":        fence,
		"status":       resp.status,
		"content_type": resp.contentType,
		"body":         resp.body,
	})...)
}

// release forgets the record after an unexpected error. It runs even when
// the request's context has ended (the client hung up mid-effect).
func (k *Keys) release(ctx context.Context, r *request, fence int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
	defer cancel()
	// A connection lost under the request usually means the pool still
	// holds more dead ones: each failed attempt discards its connection,
	// so a few attempts reach a fresh one. If the database itself is
	// unreachable, the lock expires and a retry takes over.
	for range 3 {
		_, err := k.pool.Exec(ctx, sqlRelease, r.scope, r.subject, r.key, fence)
		if err == nil || !errors.Is(pg.MapError(err), pg.ErrUnavailable) || ctx.Err() != nil {
			return
		}
	}
}

// plain runs fn without a key (Optional routes).
func (k *Keys) plain(c echo.Context, fn Func) error {
	var resp response
	err := pg.InTx(c.Request().Context(), k.pool, func(tx pgx.Tx) error {
		status, body, err := fn(c.Request().Context(), tx)
		if err != nil {
			return err
		}
		resp, err = render(c, status, body)
		return err
	})
	if err != nil {
		return err
	}
	return write(c, resp, false)
}

// response is what is sent and stored: exactly these bytes, both times.
type response struct {
	status      int
	contentType string
	body        []byte
}

func render(c echo.Context, status int, body any) (response, error) {
	if p, ok := body.(*httpx.Problem); ok {
		if status == 0 {
			status = p.Status
		}
		return response{status: status, contentType: httpx.ProblemContentType, body: httpx.ProblemDocument(c, p)}, nil
	}
	if status < 200 || status > 499 {
		return response{}, fmt.Errorf("idem: handler returned status %d; return an error for failures", status)
	}
	switch b := body.(type) {
	case nil:
		return response{status: status, body: []byte{}}, nil
	case []byte:
		return response{status: status, contentType: echo.MIMEApplicationJSON, body: b}, nil
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return response{}, fmt.Errorf("idem: encode response: %w", err)
		}
		return response{status: status, contentType: echo.MIMEApplicationJSON, body: buf}, nil
	}
}

func write(c echo.Context, resp response, replayed bool) error {
	if replayed {
		c.Response().Header().Set(ReplayedHeader, "true")
	}
	if len(resp.body) == 0 && resp.contentType == "" {
		return c.NoContent(resp.status)
	}
	return c.Blob(resp.status, resp.contentType, resp.body)
}
