package notify

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/fencelab/fencelab/core/claim"
)

// EventRequest is the body of POST /notify/events: "order ord-1001 shipped,
// tell user-0042".
type EventRequest struct {
	UserID   string          `json:"user_id"`
	EventKey string          `json:"event_key"`
	Template string          `json:"template"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// PreferencesRequest is the body of PUT /notify/users/{id}/preferences. It
// replaces the user's whole set: a channel left out is disabled.
type PreferencesRequest struct {
	Channels map[string]bool `json:"channels"`
}

// Preferences is a user's channel set as stored.
type Preferences struct {
	UserID    string          `json:"user_id"`
	Channels  map[string]bool `json:"channels"`
	UpdatedAt time.Time       `json:"updated_at"`
	UpdatedBy string          `json:"updated_by"`
}

// Notification is one logical notification: one per (user, event) (NTF-I1).
type Notification struct {
	ID          int64           `json:"id"`
	UserID      string          `json:"user_id"`
	EventKey    string          `json:"event_key"`
	Template    string          `json:"template"`
	Data        json.RawMessage `json:"data"`
	SubmittedBy string          `json:"submitted_by"`
	CreatedAt   time.Time       `json:"created_at"`
	Tasks       []Task          `json:"tasks"`
}

// Task is one channel's delivery of a notification (NTF-I2). Its state is
// its claim job's, in the notification vocabulary (TaskState).
type Task struct {
	ID             int64      `json:"id"`
	NotificationID int64      `json:"notification_id"`
	Channel        string     `json:"channel"`
	DeliveryKey    string     `json:"delivery_key"`
	State          string     `json:"state"`
	JobID          int64      `json:"job_id"`
	Fence          int64      `json:"fence"`
	Claims         int        `json:"claims"`
	LastError      string     `json:"last_error,omitempty"`
	Attempts       []Attempt  `json:"attempts,omitempty"`
	Decisions      []Decision `json:"decisions,omitempty"`
}

// Task states: the claim job's state, named for a delivery.
const (
	TaskQueued      = "queued"       // ready: waiting for its due time and a worker
	taskSending     = "sending"      // running: a worker holds the token
	TaskUnknown     = "unknown"      // the last call got no answer; the resolver will look
	TaskDelivered   = "delivered"    // succeeded
	TaskFailed      = "failed"       // the channel refused, or the attempts ran out, with nothing sent
	TaskCancelled   = "cancelled"    // the preference was off at claim time (NTF-I5)
	TaskNeedsReview = "needs_review" // no machine can tell whether it was sent: a person decides
)

var taskStates = map[claim.State]string{
	claim.StateReady:       TaskQueued,
	claim.StateRunning:     taskSending,
	claim.StateUnknown:     TaskUnknown,
	claim.StateSucceeded:   TaskDelivered,
	claim.StateFailed:      TaskFailed,
	claim.StateCancelled:   TaskCancelled,
	claim.StateNeedsReview: TaskNeedsReview,
}

// TaskState names a job state for a delivery task.
func taskState(s claim.State) string {
	if n, ok := taskStates[s]; ok {
		return n
	}
	return string(s)
}

// Attempt is one call to a channel, as recorded (NTF-I3).
type Attempt struct {
	No         int        `json:"no"`
	Op         string     `json:"op"` // send | query
	Fence      int64      `json:"fence"`
	Worker     string     `json:"worker"`
	KeySent    string     `json:"key_sent"`
	Outcome    string     `json:"outcome"` // pending | success | failed | unknown
	EffectID   string     `json:"effect_id,omitempty"`
	Detail     string     `json:"detail,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Attempt operations and outcomes.
const (
	opSend  = "send"
	OpQuery = "query"

	outcomePending = "pending"
	OutcomeSuccess = "success"
	outcomeFailed  = "failed"
	OutcomeUnknown = "unknown"
)

// ResolveRequest is the body of POST /notify/review/{task}/resolve.
type ResolveRequest struct {
	Action string `json:"action"` // delivered | resend | give_up
	Reason string `json:"reason"`
}

// Review actions and the claim decisions they apply.
const (
	ActionDelivered = "delivered"
	ActionResend    = "resend"
	ActionGiveUp    = "give_up"
)

var actionDecisions = map[string]claim.Decision{
	ActionDelivered: claim.DecideSucceeded,
	ActionResend:    claim.DecideRetry,
	ActionGiveUp:    claim.DecideFailed,
}

// Decision is a person's resolution of a task in review.
type Decision struct {
	Action    string    `json:"action"`
	DecidedBy string    `json:"decided_by"`
	Reason    string    `json:"reason"`
	JobFence  int64     `json:"job_fence"`
	DecidedAt time.Time `json:"decided_at"`
}

// ReviewItem is one task waiting for a person in GET /notify/review.
type reviewItem struct {
	Task         Task      `json:"task"`
	UserID       string    `json:"user_id"`
	EventKey     string    `json:"event_key"`
	WaitingSince time.Time `json:"waiting_since"`
}

// ReviewPage is the body of GET /notify/review.
type ReviewPage struct {
	Items []reviewItem `json:"items"`
	// Next is the cursor for the following page (?after=…), empty at the end.
	Next string `json:"next,omitempty"`
}

// DeliveryKey is what every call for the task of notification id on
// channel carries; the same expression generates notify_task.delivery_key.
func DeliveryKey(notificationID int64, channel string) string {
	return "notify-" + strconv.FormatInt(notificationID, 10) + "-" + channel
}

// jobPayload is a delivery job's payload (the task is found by job id; the
// payload is for people reading GET /jobs/{id}).
type jobPayload struct {
	NotificationID int64  `json:"notification_id"`
	Channel        string `json:"channel"`
}

// message is what a channel is asked to deliver.
type message struct {
	UserID   string          `json:"user_id"`
	EventKey string          `json:"event_key"`
	Template string          `json:"template"`
	Data     json.RawMessage `json:"data"`
}

// Result is stored in a delivered task's job result.
type Result struct {
	EffectID string `json:"effect_id,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Found    bool   `json:"found_by_query,omitempty"`
	// DecidedBy: a person marked it delivered (GET the task's decisions for why).
	DecidedBy string `json:"decided_by,omitempty"`
}
