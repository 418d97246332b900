package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kind declares one kind of job: how to run it and what to do when its
// outcome is in doubt. Modules list their kinds in app.Module.Kinds; the
// deployable's worker pool runs every module's kinds.
//
//	claim.Kind{
//		Name:        "flashsale.release",
//		Every:       time.Minute, // periodic: one job per minute across all processes
//		Handle:      s.releaseExpired,
//	}
//
//	claim.Kind{
//		Name:        "notify.send",
//		SideEffects: true,           // a lapsed lease means "maybe sent": unknown, then Resolve
//		OnClaim:     s.stillWanted,  // NTF-I5: re-check the preference inside the claim tx
//		Handle:      s.send,
//		Resolve:     s.lookUpDelivery,
//	}
type Kind struct {
	// Name is the job kind ([a-z][a-z0-9_.:-]*, ≤ 100 bytes); prefix it with
	// the module ("notify.send").
	Name string

	// Handle runs one claimed job. Its context ends when the heartbeat loses
	// the lease (or the pool shuts down past its grace period). Return
	//   nil                 → the pool completes the job (fenced) with the
	//                         value given to job.SetResult, unless the handler
	//                         already committed it with Client.CompleteTx;
	//   Unknown(err)        → the effect may have happened: state unknown,
	//                         settled later by Resolve;
	//   Permanent(err)      → failed now, no retry;
	//   any other error     → retried after exponential backoff with jitter,
	//                         failed once max_attempts claims are spent.
	Handle func(ctx context.Context, job *Job) error

	// SideEffects marks kinds that act outside the database (a payment, a
	// message, the chapter-14 tool): when such a job's lease lapses nobody
	// knows whether the effect happened, so RecoverExpired moves it to
	// unknown instead of ready. Kinds whose whole effect commits with
	// CompleteTx leave it false: re-running them is harmless.
	SideEffects bool

	// Resolve is the kind's authoritative query for an unknown job (ask the
	// provider by the job's idempotency key). Return Found(result) when the
	// effect exists, Absent() when the provider authoritatively has none;
	// an error (including "this provider cannot be queried") sends the job to
	// needs_review. Nil Resolve: unknown jobs go straight to needs_review.
	Resolve func(ctx context.Context, job Job) (Resolution, error)

	// OnClaim, if set, runs inside the claim transaction for each job of this
	// kind, after the job became running and before the transaction commits.
	// It may read rows that decide whether the job should still run (a
	// preference, an order state) under the same snapshot and locks; return
	// Cancel(reason) to finish the job as cancelled instead of running it.
	// Any other error aborts the whole claim transaction (nothing is claimed).
	OnClaim func(ctx context.Context, tx pgx.Tx, job Job) error

	// Every makes the kind periodic: each running pool enqueues one job per
	// time slot (business key "every:<slot start, unix seconds>"), due at
	// the slot start. Several processes enqueue the same key, so each slot
	// runs once.
	Every time.Duration

	// KeepFinished exempts the kind's finished jobs from claim.purge: a
	// module's rows point at them (a notification's task, an uploaded
	// file's processing run) and the module's own retention removes them
	// with the rows that point at them (docs/DATA.md).
	KeepFinished bool

	// MaxAttempts for jobs enqueued without their own (0: DefaultMaxAttempts).
	MaxAttempts int
	// Backoff returns the delay before the next attempt after attempt n
	// failed (nil: DefaultBackoff).
	Backoff func(attempt int) time.Duration
}

func (k Kind) backoff(attempt int) time.Duration {
	if k.Backoff != nil {
		return k.Backoff(attempt)
	}
	return DefaultBackoff(attempt)
}

// Backoff bounds for DefaultBackoff.
const (
	BackoffBase = time.Second
	BackoffMax  = 10 * time.Minute
)

// DefaultBackoff is exponential backoff with "equal jitter": attempt n waits
// a random duration in [d/2, d] where d = min(BackoffMax, BackoffBase·2^(n-1)).
// The jitter spreads a burst of failures so the retries do not arrive as a
// new burst (chapter 2, docs/chapters/02-claim.md).
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := BackoffMax
	if attempt <= 30 {
		d = min(BackoffMax, BackoffBase<<(attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// outcome errors a handler returns.
type unknownErr struct{ err error }
type permanentErr struct{ err error }
type cancelErr struct{ reason string }

func (e unknownErr) Error() string   { return "outcome unknown: " + errString(e.err) }
func (e unknownErr) Unwrap() error   { return e.err }
func (e permanentErr) Error() string { return "permanent: " + errString(e.err) }
func (e permanentErr) Unwrap() error { return e.err }
func (e cancelErr) Error() string    { return "cancelled: " + e.reason }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Unknown wraps an error after which the external effect may or may not
// have happened (a timeout after sending, a dropped response).
func Unknown(err error) error { return unknownErr{err} }

// Permanent wraps an error that retrying cannot fix.
func Permanent(err error) error { return permanentErr{err} }

// Cancel is what an OnClaim hook returns to finish a job without running it.
func Cancel(reason string) error { return cancelErr{reason} }

// IsUnknown reports whether err was wrapped by Unknown.
func IsUnknown(err error) bool { var u unknownErr; return errors.As(err, &u) }

// Resolution is the answer of a kind's authoritative query.
type Resolution struct {
	found  bool
	result json.RawMessage
}

// Found: the effect exists; the job becomes succeeded with result.
func Found(result any) Resolution {
	b, err := json.Marshal(result)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprint(result))
	}
	return Resolution{found: true, result: b}
}

// Absent: the provider authoritatively has no effect for this job (an
// "empty query"); the job goes back to ready for a new claim.
func Absent() Resolution { return Resolution{} }

// periodicKey is the business key of a periodic kind's slot.
func periodicKey(slot time.Time) string { return fmt.Sprintf("every:%d", slot.Unix()) }
