// Package claim is the durable job engine of chapter 14: jobs live in one
// PostgreSQL table, workers claim them with FOR UPDATE SKIP LOCKED inside the
// database, and every write after the claim carries the fencing token the
// claim granted.
//
// The shape of one attempt:
//
//	enqueue (idempotent per kind + business key, inside the caller's tx)
//	claim   one statement: ready → running, owner, fence+1, attempts+1, lease
//	        — commits before the handler runs; no lock spans the tool call
//	run     the handler, with a context the heartbeat cancels on lease loss
//	finish  Complete / Fail / MarkUnknown, each conditional on id, owner,
//	        fence, running and an unexpired lease; otherwise ErrStaleFence,
//	        nothing changes, and a rejected_stale event is recorded
//
// A lease that lapses is reclaimed by RecoverExpired: the fence is raised
// (so the old owner's late writes are refused) and the job goes back to
// ready, or to unknown when its kind has side effects outside the database.
// Unknown jobs are settled by the kind's authoritative query (Resolve):
// found → succeeded, authoritatively absent → ready for a new claim,
// cannot ask → needs_review. Unknown is never silently treated as failed.
//
// Every transition writes a job_event row in the same statement; the
// CLAIM-I1..I4 invariants are SQL over those two tables.
package claim

import (
	"encoding/json"
	"errors"
	"time"
)

// State is a job's state.
type State string

const (
	StateReady       State = "ready"        // waiting for due_at and a claim
	StateRunning     State = "running"      // claimed: owner, fence and lease are set
	StateUnknown     State = "unknown"      // an external effect may or may not have happened
	StateSucceeded   State = "succeeded"    // terminal
	StateFailed      State = "failed"       // terminal: max_attempts spent, or a permanent error
	StateNeedsReview State = "needs_review" // terminal until a human decides: the outcome cannot be established
	StateCancelled   State = "cancelled"    // terminal: a kind's OnClaim hook decided the job must not run
)

// Event names recorded in job_event.
const (
	EvClaimed        = "claimed"
	EvHeartbeatLost  = "heartbeat_lost"
	EvSucceeded      = "succeeded"
	EvRetryScheduled = "retry_scheduled"
	EvFailed         = "failed"
	EvCancelled      = "cancelled"
	EvRejectedStale  = "rejected_stale"
	EvRecovered      = "recovered"
	EvUnknown        = "unknown"
	EvResolving      = "resolving"
	EvResolvedFound  = "resolved_found"
	EvResolvedAbsent = "resolved_absent"
	EvNeedsReview    = "needs_review"
)

var (
	// ErrStaleFence: the writer no longer holds the job (another claim,
	// recovery or resolution raised the fence, the lease expired, or the job
	// left running). Nothing was changed; a rejected_stale event was recorded.
	ErrStaleFence = errors.New("claim: stale fence: the job is no longer held with this fence")
	// ErrNotFound: no job with that id.
	ErrNotFound = errors.New("claim: job not found")
	// ErrInvalid: a malformed kind, business key, payload or option.
	ErrInvalid = errors.New("claim: invalid job")
)

// Job is one row of the job table as a worker sees it after a claim.
type Job struct {
	ID          int64           `json:"id"`
	Kind        string          `json:"kind"`
	BusinessKey string          `json:"business_key"`
	State       State           `json:"state"`
	Payload     json.RawMessage `json:"payload"`
	DueAt       time.Time       `json:"due_at"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	Owner       string          `json:"owner,omitempty"`
	Fence       int64           `json:"fence"`
	LeaseUntil  *time.Time      `json:"lease_until,omitempty"`
	LastError   string          `json:"last_error,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`

	// Set by the worker pool while a handler runs.
	result   json.RawMessage
	finished bool
}

// Token is what a writer must carry: the job, its owner and the fence the
// claim granted. Every fenced statement compares all three.
type Token struct {
	ID    int64
	Owner string
	Fence int64
}

// Token returns the job's fencing token.
func (j *Job) Token() Token { return Token{ID: j.ID, Owner: j.Owner, Fence: j.Fence} }

// UnmarshalPayload decodes the job's payload into v.
func (j *Job) UnmarshalPayload(v any) error { return json.Unmarshal(j.Payload, v) }

// SetResult records the value the worker pool stores in job.result when the
// handler returns nil. A handler that commits its own completion with
// Client.CompleteTx passes the result there instead.
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	j.result = b
	return nil
}

// Event is one row of a job's history.
type Event struct {
	ID     int64     `json:"id"`
	JobID  int64     `json:"job_id"`
	Event  string    `json:"event"`
	Fence  int64     `json:"fence"`
	Owner  string    `json:"owner,omitempty"`
	State  State     `json:"state,omitempty"`
	At     time.Time `json:"at"`
	Detail string    `json:"detail,omitempty"`
}

// NewJob is what Enqueue inserts.
type NewJob struct {
	Kind string
	// BusinessKey identifies the business operation (an order id, a
	// notification id, a slot). Enqueue is idempotent on (Kind, BusinessKey).
	BusinessKey string
	// Payload is marshalled to JSON (nil: {}). At most MaxPayloadBytes.
	Payload any
	// DueAt delays the first claim (zero: now).
	DueAt time.Time
	// MaxAttempts bounds claims (0: the kind's, else DefaultMaxAttempts).
	MaxAttempts int
}

// Limits on what Enqueue accepts; the table's CHECKs say the same.
const (
	MaxPayloadBytes    = 64 << 10
	MaxBusinessKeyLen  = 256
	DefaultMaxAttempts = 5
)
