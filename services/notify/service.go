package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// Service holds the module's rules: intake, preferences, the delivery
// kinds (delivery.go) and the review queue.
type Service struct {
	pool    *pgxpool.Pool
	jobs    *claim.Client
	log     *slog.Logger
	faults  *faults.Set
	cfg     Config
	senders map[string]sender
	m       *metrics
}

// Limits on what intake accepts.
const (
	MaxDataBytes = 16 << 10
	maxReason    = 1000
)

// Templates is every template a notification may name: the messages the
// channels know how to write. An event naming any other is refused at
// intake (422 unknown_template).
var templates = []string{"order_shipped"}

var (
	eventKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$`)
	templateRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,99}$`)
)

// validateEvent checks an event before anything is recorded and returns
// its data as a JSON object ({} when absent).
func validateEvent(req EventRequest) (json.RawMessage, error) {
	if !httpx.ValidSubject(req.UserID) {
		return nil, httpx.Invalid("invalid_user_id", "user_id must be 1-128 characters of [A-Za-z0-9._:@-]").With("field", "user_id")
	}
	if !eventKeyRE.MatchString(req.EventKey) {
		return nil, httpx.Invalid("invalid_event_key", "event_key is required: 1-200 characters of [A-Za-z0-9._:/@-], e.g. order:ord-1001:shipped").With("field", "event_key")
	}
	if !templateRE.MatchString(req.Template) {
		return nil, httpx.Invalid("invalid_template", "template is required: 1-100 characters of [a-z0-9_.-], starting with a letter").With("field", "template")
	}
	data := bytes.TrimSpace(req.Data)
	switch {
	case len(data) == 0 || bytes.Equal(data, []byte("null")):
		data = json.RawMessage("{}")
	case len(data) > MaxDataBytes:
		return nil, httpx.Invalid("data_too_large", "data must be at most %d bytes", MaxDataBytes).With("field", "data")
	case data[0] != '{':
		return nil, httpx.Invalid("invalid_data", "data must be a JSON object").With("field", "data")
	}
	// Checked after the shape of every field: a well-formed name that no
	// template carries would otherwise be accepted (201) and fail only at
	// delivery, once per channel, where nobody who sent it reads the error.
	if !slices.Contains(templates, req.Template) {
		return nil, httpx.Invalid("unknown_template", "template %q is not one of %s", req.Template, strings.Join(templates, ", ")).With("field", "template")
	}
	return data, nil
}

// Submit records an event inside tx (the idempotency record's transaction):
// the notification for (user, event) — NTF-I1 — and, when it is new, one
// task per channel the user has enabled, each with its claim job enqueued
// in the same transaction (NTF-I2), so tasks and jobs exist exactly when
// the notification does. A repeated submission changes nothing and returns
// the existing notification with created false.
func (s *Service) Submit(ctx context.Context, tx pgx.Tx, req EventRequest, data json.RawMessage, by string) (Notification, bool, error) {
	on, err := userChannels(ctx, tx, req.UserID)
	if err != nil {
		return Notification{}, false, err
	}
	n, created, err := insertNotification(ctx, tx, req, data, by)
	if err != nil {
		return Notification{}, false, err
	}
	if !created {
		rows, err := tx.Query(ctx, sqlTasks, n.ID)
		if err != nil {
			return Notification{}, false, fmt.Errorf("notify: read tasks of %d: %w", n.ID, pg.MapError(err))
		}
		n.Tasks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
		return n, false, pg.MapError(err)
	}
	var names []string
	var jobIDs []int64
	for _, ch := range Channels {
		if !on[ch.Name] {
			continue
		}
		id, _, err := s.jobs.Enqueue(ctx, tx, claim.NewJob{
			Kind: ch.Kind(), BusinessKey: DeliveryKey(n.ID, ch.Name),
			Payload: jobPayload{NotificationID: n.ID, Channel: ch.Name}, MaxAttempts: s.cfg.MaxAttempts,
		})
		if err != nil {
			return Notification{}, false, err
		}
		names, jobIDs = append(names, ch.Name), append(jobIDs, id)
	}
	n.Tasks = []Task{}
	if len(names) > 0 {
		if n.Tasks, err = insertTasks(ctx, tx, n.ID, names, jobIDs); err != nil {
			return Notification{}, false, err
		}
	}
	return n, true, nil
}

// Notification returns a notification with its tasks, attempts and
// decisions, read in one snapshot, if p may see it: its user, an admin or a
// service.
func (s *Service) Notification(ctx context.Context, id int64, p httpx.Principal) (Notification, error) {
	var n Notification
	err := pg.InTxOpts(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		n, err = loadNotification(ctx, tx, id)
		return err
	})
	if err != nil {
		return Notification{}, err
	}
	// An admin reads any notification; a service only those it submitted
	// (a service token is not a licence to read every user's messages); a
	// user only their own.
	switch {
	case p.Role == httpx.RoleAdmin:
	case p.Role == httpx.RoleService && p.Subject == n.SubmittedBy:
	case p.Role == httpx.RoleUser && p.Subject == n.UserID:
	default:
		return Notification{}, fmt.Errorf("%w: notification %d", errNotYours, id)
	}
	if n.Tasks == nil {
		n.Tasks = []Task{}
	}
	return n, nil
}

// validatePreferences turns a request into the full channel set (a channel
// left out is off); an unknown channel is a 422.
func validatePreferences(req PreferencesRequest) (names []string, enabled []bool, err error) {
	if req.Channels == nil {
		return nil, nil, httpx.Invalid("channels_required", `channels is required, e.g. {"channels":{"email":true,"sms":false,"push":true}}`).With("field", "channels")
	}
	var unknown []string
	for name := range req.Channels {
		if _, ok := channelByName(name); !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, nil, httpx.Invalid("unknown_channel", "unknown channel %q (known: email, sms, push)", truncate(unknown[0], 40)).
			With("field", "channels."+truncate(unknown[0], 40))
	}
	for _, ch := range Channels {
		names, enabled = append(names, ch.Name), append(enabled, req.Channels[ch.Name])
	}
	return names, enabled, nil
}

// PutPreferences replaces a user's channel set, creating the user on first
// use. A task already queued for a channel turned off is cancelled when a
// worker claims it (NTF-I5).
func (s *Service) PutPreferences(ctx context.Context, userID string, req PreferencesRequest, p httpx.Principal) (Preferences, error) {
	if !p.CanActFor(userID) {
		return Preferences{}, fmt.Errorf("%w: preferences of %s", errNotYours, userID)
	}
	if !httpx.ValidSubject(userID) {
		return Preferences{}, httpx.Invalid("invalid_user_id", "user id must be 1-128 characters of [A-Za-z0-9._:@-]").With("field", "id")
	}
	names, enabled, err := validatePreferences(req)
	if err != nil {
		return Preferences{}, err
	}
	return putPreferences(ctx, s.pool, userID, names, enabled, p.Subject)
}

// Preferences returns a user's channel set to the user, an admin or a service.
func (s *Service) Preferences(ctx context.Context, userID string, p httpx.Principal) (Preferences, error) {
	if !p.Privileged() && p.Subject != userID {
		return Preferences{}, fmt.Errorf("%w: preferences of %s", errNotYours, userID)
	}
	return getPreferences(ctx, s.pool, userID)
}

// ReviewQueue lists tasks waiting for a person, oldest task first, after
// the cursor.
func (s *Service) ReviewQueue(ctx context.Context, after int64, limit int) (ReviewPage, error) {
	kinds := make([]string, len(Channels))
	for i, ch := range Channels {
		kinds[i] = ch.Kind()
	}
	items, err := reviewQueue(ctx, s.pool, after, limit+1, kinds)
	if err != nil {
		return ReviewPage{}, err
	}
	page := ReviewPage{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		page.Next = fmt.Sprint(page.Items[limit-1].Task.ID)
	}
	if page.Items == nil {
		page.Items = []reviewItem{}
	}
	return page, nil
}

func validateResolve(req ResolveRequest) (claim.Decision, error) {
	d, ok := actionDecisions[req.Action]
	if !ok {
		return "", httpx.Invalid("invalid_action", "action must be delivered, resend or give_up").With("field", "action")
	}
	if n := len([]rune(req.Reason)); n < 1 || n > maxReason || len(bytes.TrimSpace([]byte(req.Reason))) == 0 {
		return "", httpx.Invalid("invalid_reason", "reason is required: 1-%d characters saying why", maxReason).With("field", "reason")
	}
	return d, nil
}

// Resolve applies a person's decision (validateResolve) to a task in
// review, inside tx: the
// job's transition (claim.DecideTx) and the record of who decided and why
// commit together. delivered → the task is delivered; resend → it is sent
// again now (a channel without keys may deliver twice: the person decided
// that is better than never); give_up → failed.
func (s *Service) Resolve(ctx context.Context, tx pgx.Tx, taskID int64, req ResolveRequest, d claim.Decision, who string) (Task, error) {
	t, err := loadTask(ctx, tx, taskID)
	if err != nil {
		return Task{}, err
	}
	var result any
	if d == claim.DecideSucceeded {
		result = Result{DecidedBy: who}
	}
	j, err := s.jobs.DecideTx(ctx, tx, t.JobID, d, who, fmt.Sprintf("review %s by %s: %s", req.Action, who, req.Reason), result)
	if errors.Is(err, claim.ErrNotInReview) {
		return Task{}, fmt.Errorf("%w: task %d is %s", ErrNotInReview, taskID, t.State)
	}
	if err != nil {
		return Task{}, err
	}
	dec := Decision{Action: req.Action, DecidedBy: who, Reason: req.Reason, JobFence: j.Fence}
	if dec.DecidedAt, err = insertDecision(ctx, tx, taskID, dec); err != nil {
		return Task{}, err
	}
	t.State, t.Fence, t.Claims, t.LastError = taskState(j.State), j.Fence, j.Attempts, j.LastError
	t.Decisions = append(t.Decisions, dec)
	return t, nil
}

// DemoUsers are the preferences `fencelab dev` seeds.
var demoUsers = map[string]map[string]bool{
	"user-0042": {ChannelEmail: true, ChannelSMS: true, ChannelPush: true},
	"user-0043": {ChannelEmail: true, ChannelSMS: false, ChannelPush: true},
	"user-0044": {ChannelEmail: false, ChannelSMS: true, ChannelPush: false},
}

func (s *Service) seed(ctx context.Context) error {
	for user, chans := range demoUsers {
		var names []string
		var on []bool
		for _, ch := range Channels {
			names, on = append(names, ch.Name), append(on, chans[ch.Name])
		}
		if err := seedPreferences(ctx, s.pool, user, names, on); err != nil {
			return err
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// LoopbackFaultRequest makes the in-process fake channel misbehave for the
// next Times calls, so that a reader can watch a contract at work in dev
// (POST /notify/admin/loopback/{channel}/faults).
type loopbackFaultRequest struct {
	// DropResponse: the message goes out, the answer never comes back (an
	// unknown outcome: push lands in review, sms is looked up, email resent).
	DropResponse bool `json:"drop_response"`
	// Status: answer with this error status and send nothing (429, 5xx).
	Status int `json:"status"`
	// Times: how many calls it applies to (default 1, at most 100).
	Times int `json:"times"`
}

// InjectLoopbackFault arms a fault in the channel's in-process fake
// provider. A channel configured with a real URL refuses (409).
func (s *Service) injectLoopbackFault(channel string, req loopbackFaultRequest) (loopbackFaultRequest, error) {
	if _, ok := channelByName(channel); !ok {
		return req, httpx.NotFound("unknown_channel", "no channel %q (email, sms, push)", truncate(channel, 40))
	}
	if req.Times == 0 {
		req.Times = 1
	}
	if req.Times < 1 || req.Times > 100 {
		return req, httpx.Invalid("invalid_times", "times must be 1..100")
	}
	if req.Status != 0 && (req.Status < 400 || req.Status > 599) {
		return req, httpx.Invalid("invalid_status", "status must be 400..599 (or absent)")
	}
	if req.DropResponse == (req.Status != 0) {
		return req, httpx.Invalid("invalid_fault", "give exactly one of drop_response:true or status")
	}
	lb, ok := s.senders[channel].(*loopback)
	if !ok {
		return req, httpx.Conflict("channel_not_loopback", "the %s channel is a configured provider, not the in-process fake", channel)
	}
	err := lb.inject(fakeprovider.Fault{Op: fakeprovider.OpCreate, Times: req.Times, Status: req.Status, DropResponse: req.DropResponse})
	return req, err
}
