package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/pg"
)

// All of the module's SQL (invariants.go holds the invariant checks). The
// task's state lives in its claim job: the queries below read the engine's
// job table to show it, and never write it — every job transition goes
// through core/claim.
const (
	// sqlUserChannels: the user's enabled channels; no row for a user the
	// service does not know.
	sqlUserChannels = `
SELECT coalesce(array_agg(p.channel) FILTER (WHERE p.enabled), '{}')
FROM notify_user u LEFT JOIN notify_preference p ON p.user_id = u.user_id
WHERE u.user_id = $1
GROUP BY u.user_id`

	// sqlInsertNotification: NTF-I1. The unique (user_id, submitted_by,
	// event_key) decides every race: a concurrent duplicate waits for the
	// first insert's transaction, then inserts nothing and reads the
	// committed row (sqlNotificationByEvent). The key is scoped by the
	// submitting service ($5, its verified subject): another service's
	// event under the same key is another event, and never reads this one.
	sqlInsertNotification = `
INSERT INTO notify_notification (user_id, event_key, template, data, submitted_by)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (user_id, submitted_by, event_key) DO NOTHING
RETURNING ` + notificationColumns

	notificationColumns = `id, user_id, event_key, template, data, submitted_by, created_at`

	sqlNotificationByEvent = `SELECT ` + notificationColumns + ` FROM notify_notification WHERE user_id = $1 AND submitted_by = $2 AND event_key = $3`
	sqlNotification        = `SELECT ` + notificationColumns + ` FROM notify_notification WHERE id = $1`

	// sqlInsertTasks: NTF-I2's unique keys refuse a second task per
	// (notification, channel) and a second task per job.
	sqlInsertTasks = `
INSERT INTO notify_task (notification_id, channel, job_id)
SELECT $1, c, j FROM unnest($2::text[], $3::bigint[]) AS x(c, j)
RETURNING id, notification_id, channel, delivery_key, job_id`

	taskColumns = `t.id, t.notification_id, t.channel, t.delivery_key, t.job_id,
       coalesce(j.state, ''), coalesce(j.fence, 0), coalesce(j.attempts, 0), coalesce(j.last_error, '')`

	sqlTasks = `
SELECT ` + taskColumns + `
FROM notify_task t LEFT JOIN job_all j ON j.id = t.job_id
WHERE t.notification_id = $1 ORDER BY t.id`

	sqlTask = `
SELECT ` + taskColumns + `
FROM notify_task t LEFT JOIN job_all j ON j.id = t.job_id
WHERE t.id = $1`

	sqlAttempts = `
SELECT a.task_id, a.attempt_no, a.op, a.fence, a.worker, a.key_sent, a.outcome,
       coalesce(a.effect_id, ''), coalesce(a.detail, ''), a.started_at, a.finished_at
FROM notify_attempt a JOIN notify_task t ON t.id = a.task_id
WHERE t.notification_id = $1 ORDER BY a.task_id, a.attempt_no`

	sqlDecisions = `
SELECT d.task_id, d.action, d.decided_by, d.reason, d.job_fence, d.decided_at
FROM notify_review_decision d JOIN notify_task t ON t.id = d.task_id
WHERE t.notification_id = $1 ORDER BY d.id`

	// sqlPreferenceAtClaim: NTF-I5, run by the claim transaction. FOR SHARE
	// makes a concurrent preference change either commit before the claim
	// reads it (and cancel the task) or wait for the claim to commit (and
	// find the task already being sent: it was on when the claim was made).
	// No row: the preference is gone, which counts as off.
	sqlPreferenceAtClaim = `
SELECT t.channel, p.enabled
FROM notify_task t
JOIN notify_notification n ON n.id = t.notification_id
JOIN notify_preference p ON p.user_id = n.user_id AND p.channel = t.channel
WHERE t.job_id = $1
FOR SHARE OF p`

	// sqlBeginAttempt writes a call's attempt row before the call goes out
	// (NTF-I3), and only while the caller still holds the task's job with
	// the token it was granted (@fence, @owner, @held_state the state a
	// holder sees: running for a worker, unknown for the resolver): a holder
	// whose lease lapsed starts no new call (NTF-I2). No row: not held.
	//
	// maybe_sent: an earlier send of the task may have delivered (its
	// outcome is success, unknown or still pending) and nothing has settled
	// it since — no query answered "absent" after it, no person decided to
	// resend. With @guard (a send on a channel without idempotency keys) such a
	// task is not sent again: the row comes back with id 0 (NTF-I4).
	sqlBeginAttempt = `
WITH task AS (
    SELECT t.id, t.delivery_key, n.user_id, n.event_key, n.template, n.data
    FROM notify_task t JOIN notify_notification n ON n.id = t.notification_id
    WHERE t.job_id = @job_id
      AND EXISTS (SELECT 1 FROM job
                  WHERE job.id = @job_id AND job.fence = @fence AND job.owner = @owner
                    AND job.state = @held_state AND job.lease_until > now())
),
prior AS (
    SELECT coalesce(max(s.attempt_no), 0) AS last_no,
           coalesce(bool_or(s.op = 'send' AND s.outcome IN ('pending', 'unknown', 'success')
               AND NOT EXISTS (SELECT 1 FROM notify_attempt q
                               WHERE q.task_id = s.task_id AND q.op = 'query' AND q.attempt_no > s.attempt_no
                                 AND q.outcome = 'success' AND q.effect_id IS NULL)
               AND NOT EXISTS (SELECT 1 FROM notify_review_decision d
                               WHERE d.task_id = s.task_id AND d.action = 'resend' AND d.decided_at > s.started_at)),
               false) AS maybe_sent
    FROM notify_attempt s WHERE s.task_id = (SELECT id FROM task)
),
ins AS (
    INSERT INTO notify_attempt (task_id, attempt_no, op, fence, worker, key_sent)
    SELECT task.id, prior.last_no + 1, @op, @fence, @owner, task.delivery_key
    FROM task, prior
    WHERE NOT (@guard::bool AND prior.maybe_sent)
    RETURNING id, attempt_no
)
SELECT coalesce(ins.id, 0), coalesce(ins.attempt_no, 0), task.delivery_key,
       task.user_id, task.event_key, task.template, task.data, prior.maybe_sent
FROM task CROSS JOIN prior LEFT JOIN ins ON true`

	// sqlFinishAttempt gives a pending attempt its outcome, once (the
	// trigger refuses anything else). It is not fenced: a superseded
	// holder's call happened, and what it returned is a fact worth keeping.
	sqlFinishAttempt = `
UPDATE notify_attempt
SET outcome = $2, effect_id = nullif($3, ''), detail = nullif($4, ''),
    finished_at = greatest(clock_timestamp(), started_at)
WHERE id = $1 AND outcome = 'pending'`

	sqlReviewQueue = `
SELECT ` + taskColumns + `, n.user_id, n.event_key, j.updated_at
FROM job j
JOIN notify_task t ON t.job_id = j.id
JOIN notify_notification n ON n.id = t.notification_id
WHERE j.state = 'needs_review' AND j.kind = ANY($3::text[]) AND t.id > $1
ORDER BY t.id
LIMIT $2`

	sqlInsertDecision = `
INSERT INTO notify_review_decision (task_id, action, decided_by, reason, job_fence)
VALUES ($1, $2, $3, $4, $5)
RETURNING decided_at`

	// sqlPutPreferences replaces a user's channel set, creating the user on
	// first use (the foreign key sees the CTE's row: deferred to the end of
	// the statement).
	sqlPutPreferences = `
WITH u AS (
    INSERT INTO notify_user (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING
)
INSERT INTO notify_preference (user_id, channel, enabled, updated_by)
SELECT $1, c, e, $4 FROM unnest($2::text[], $3::bool[]) AS x(c, e)
ON CONFLICT (user_id, channel) DO UPDATE
    SET enabled = EXCLUDED.enabled, updated_at = now(), updated_by = EXCLUDED.updated_by
RETURNING channel, enabled, updated_at, updated_by`

	// sqlSeedPreferences is the dev seed: create, never overwrite.
	sqlSeedPreferences = `
WITH u AS (
    INSERT INTO notify_user (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING
)
INSERT INTO notify_preference (user_id, channel, enabled, updated_by)
SELECT $1, c, e, 'seed' FROM unnest($2::text[], $3::bool[]) AS x(c, e)
ON CONFLICT (user_id, channel) DO NOTHING`

	sqlGetPreferences = `
SELECT channel, enabled, updated_at, updated_by FROM notify_preference WHERE user_id = $1`

	// sqlPurge is the retention (notify.purge, FENCELAB_NOTIFY_RETENTION,
	// docs/DATA.md): up to $2 notifications created more than $1
	// microseconds ago by the database clock whose every task's job has
	// finished, also more than $1 ago, are deleted with their tasks,
	// attempts and review decisions in one statement; it returns their
	// tasks' job ids, which the caller deletes (claim.DeleteFinishedTx) in
	// the same transaction. Oldest first along notify_notification_created,
	// a task probe per notification: a batch examines what it deletes and
	// the few old notifications still waiting on a live task (the live
	// set), never the history inside the window. SKIP LOCKED lets two runs
	// split the work. The live-task check is a per-row subquery (not an
	// anti-join) so the plan walks the index in order and stops at the
	// limit, instead of sorting the whole backlog. gate says, for this
	// transaction only, that the append-only triggers may let these
	// deletes through (NTF-I3: a whole notification goes, never a row out
	// of a task's history); every delete of attempts and decisions reads
	// tasks, which reads gate first.
	sqlPurge = `
WITH gate AS MATERIALIZED (
    SELECT set_config('fencelab.notify_purge', 'on', true) AS purge
), doomed AS MATERIALIZED (
    SELECT n.id
      FROM notify_notification n
     WHERE n.created_at < now() - $1::bigint * interval '1 microsecond'
       AND (SELECT count(*) FROM notify_task t JOIN job_all j ON j.id = t.job_id
             WHERE t.notification_id = n.id
               AND (j.state NOT IN ('succeeded', 'failed', 'cancelled')
                    OR j.updated_at >= now() - $1::bigint * interval '1 microsecond')) = 0
     ORDER BY n.created_at, n.id
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), tasks AS MATERIALIZED (
    SELECT t.id, t.job_id FROM notify_task t, gate
     WHERE gate.purge = 'on' AND t.notification_id = ANY (ARRAY(SELECT id FROM doomed))
), attempts AS (
    DELETE FROM notify_attempt WHERE task_id = ANY (ARRAY(SELECT id FROM tasks))
), decisions AS (
    DELETE FROM notify_review_decision WHERE task_id = ANY (ARRAY(SELECT id FROM tasks))
), gone_tasks AS (
    DELETE FROM notify_task WHERE id = ANY (ARRAY(SELECT id FROM tasks))
), gone AS (
    DELETE FROM notify_notification WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id
)
SELECT (SELECT count(*) FROM gone), ARRAY(SELECT job_id FROM tasks)`
)

// PurgeBatch bounds one retention statement (notifications; each with up
// to one task per channel).
const PurgeBatch = 500

// Purge deletes, in batches, the notifications past retention whose tasks
// have all finished, with everything under them and their claim jobs,
// each batch in one transaction; it returns the notifications deleted.
func Purge(ctx context.Context, db pg.TxBeginner, retention time.Duration) (int64, error) {
	var total int64
	for {
		var n int64
		err := pg.InTx(ctx, db, func(tx pgx.Tx) error {
			var jobs []int64
			if err := tx.QueryRow(ctx, sqlPurge, retention.Microseconds(), PurgeBatch).Scan(&n, &jobs); err != nil {
				return pg.MapError(err)
			}
			_, err := claim.DeleteFinishedTx(ctx, tx, jobs)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("notify: purge: %w", err)
		}
		total += n
		if n < PurgeBatch {
			return total, nil
		}
	}
}

// GrowthProbes are the module's periodic queries whose cost must not grow
// with the history (plan tests, bench growth): the purge batch examines
// its notifications and their tasks' rows.
func GrowthProbes(retention time.Duration) []pg.Probe {
	return []pg.Probe{
		{Name: "notify.purge batch", When: pg.Periodic, SQL: sqlPurge,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch * (1 + len(Channels)))},
	}
}

func scanNotification(row pgx.Row) (Notification, error) {
	var n Notification
	err := row.Scan(&n.ID, &n.UserID, &n.EventKey, &n.Template, &n.Data, &n.SubmittedBy, &n.CreatedAt)
	return n, err
}

func scanTask(row pgx.Row, extra ...any) (Task, error) {
	var t Task
	var state string
	dst := append([]any{&t.ID, &t.NotificationID, &t.Channel, &t.DeliveryKey, &t.JobID,
		&state, &t.Fence, &t.Claims, &t.LastError}, extra...)
	err := row.Scan(dst...)
	t.State = taskState(claim.State(state))
	return t, err
}

// userChannels returns the user's enabled channels, or ErrUnknownUser.
func userChannels(ctx context.Context, db pg.Querier, userID string) (map[string]bool, error) {
	var names []string
	err := db.QueryRow(ctx, sqlUserChannels, userID).Scan(&names)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", errUnknownUser, userID)
	}
	if err != nil {
		return nil, fmt.Errorf("notify: read channels of %s: %w", userID, pg.MapError(err))
	}
	on := make(map[string]bool, len(names))
	for _, n := range names {
		on[n] = true
	}
	return on, nil
}

// insertNotification returns the notification for (user, submitter,
// event): the new one with created, or the one an earlier submission by
// the same service made.
func insertNotification(ctx context.Context, tx pgx.Tx, req EventRequest, data json.RawMessage, by string) (Notification, bool, error) {
	n, err := scanNotification(tx.QueryRow(ctx, sqlInsertNotification, req.UserID, req.EventKey, req.Template, data, by))
	if err == nil {
		return n, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Notification{}, false, fmt.Errorf("notify: insert notification: %w", pg.MapError(err))
	}
	n, err = scanNotification(tx.QueryRow(ctx, sqlNotificationByEvent, req.UserID, by, req.EventKey))
	if err != nil {
		return Notification{}, false, fmt.Errorf("notify: read notification %s/%s: %w", req.UserID, req.EventKey, pg.MapError(err))
	}
	return n, false, nil
}

func insertTasks(ctx context.Context, tx pgx.Tx, notificationID int64, channels []string, jobIDs []int64) ([]Task, error) {
	rows, err := tx.Query(ctx, sqlInsertTasks, notificationID, channels, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("notify: insert tasks: %w", pg.MapError(err))
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) {
		t := Task{State: TaskQueued}
		return t, r.Scan(&t.ID, &t.NotificationID, &t.Channel, &t.DeliveryKey, &t.JobID)
	})
	if err != nil {
		return nil, fmt.Errorf("notify: insert tasks: %w", pg.MapError(err))
	}
	return tasks, nil
}

// loadNotification reads a notification with its tasks, their attempts and
// decisions; db should be a repeatable-read transaction so the parts agree.
func loadNotification(ctx context.Context, db pg.Querier, id int64) (Notification, error) {
	n, err := scanNotification(db.QueryRow(ctx, sqlNotification, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Notification{}, fmt.Errorf("%w: %d", errNotificationNotFound, id)
	}
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read notification %d: %w", id, pg.MapError(err))
	}
	rows, err := db.Query(ctx, sqlTasks, id)
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read tasks of %d: %w", id, pg.MapError(err))
	}
	n.Tasks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read tasks of %d: %w", id, pg.MapError(err))
	}
	byTask := make(map[int64]*Task, len(n.Tasks))
	for i := range n.Tasks {
		byTask[n.Tasks[i].ID] = &n.Tasks[i]
	}
	rows, err = db.Query(ctx, sqlAttempts, id)
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read attempts of %d: %w", id, pg.MapError(err))
	}
	var taskID int64
	var a Attempt
	_, err = pgx.ForEachRow(rows, []any{&taskID, &a.No, &a.Op, &a.Fence, &a.Worker, &a.KeySent, &a.Outcome,
		&a.EffectID, &a.Detail, &a.StartedAt, &a.FinishedAt}, func() error {
		if t := byTask[taskID]; t != nil {
			cp := a // the scan target is reused: give the copy its own finished_at
			if a.FinishedAt != nil {
				at := *a.FinishedAt
				cp.FinishedAt = &at
			}
			t.Attempts = append(t.Attempts, cp)
		}
		return nil
	})
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read attempts of %d: %w", id, pg.MapError(err))
	}
	rows, err = db.Query(ctx, sqlDecisions, id)
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read decisions of %d: %w", id, pg.MapError(err))
	}
	var d Decision
	_, err = pgx.ForEachRow(rows, []any{&taskID, &d.Action, &d.DecidedBy, &d.Reason, &d.JobFence, &d.DecidedAt}, func() error {
		if t := byTask[taskID]; t != nil {
			t.Decisions = append(t.Decisions, d)
		}
		return nil
	})
	if err != nil {
		return Notification{}, fmt.Errorf("notify: read decisions of %d: %w", id, pg.MapError(err))
	}
	return n, nil
}

func loadTask(ctx context.Context, db pg.Querier, id int64) (Task, error) {
	t, err := scanTask(db.QueryRow(ctx, sqlTask, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, fmt.Errorf("%w: %d", errTaskNotFound, id)
	}
	if err != nil {
		return Task{}, fmt.Errorf("notify: read task %d: %w", id, pg.MapError(err))
	}
	return t, nil
}

// preferenceAtClaim reports the task's channel and whether its preference
// is on, read (and share-locked) inside the claim transaction.
func preferenceAtClaim(ctx context.Context, tx pgx.Tx, jobID int64) (channel string, on bool, err error) {
	err = tx.QueryRow(ctx, sqlPreferenceAtClaim, jobID).Scan(&channel, &on)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("notify: read preference of job %d: %w", jobID, pg.MapError(err))
	}
	return channel, on, nil
}

// attempt is a begun call.
type attempt struct {
	id        int64
	no        int
	key       string
	msg       message
	maybeSent bool // an earlier send may have delivered and nothing settled it (sqlBeginAttempt)
}

// errNotHeld: the caller no longer holds the task's job with its token;
// it must not call the channel.
var errNotHeld = fmt.Errorf("notify: task no longer held with this token: %w", claim.ErrStaleFence)

// beginAttemptStmt is sqlBeginAttempt rewritten to $n once (pg.MustNamed).
var beginAttemptStmt = pg.MustNamed(sqlBeginAttempt)

// beginAttempt records a call about to be made by the holder of j (held:
// the state a holder sees). With guard, a task that may have been delivered
// already gets no attempt: a.id is 0 and the caller must not call.
func beginAttempt(ctx context.Context, db pg.Querier, j claim.Job, op string, held claim.State, guard bool) (attempt, error) {
	var a attempt
	err := db.QueryRow(ctx, beginAttemptStmt.SQL, beginAttemptStmt.Args(pgx.NamedArgs{
		"job_id":     j.ID,
		"fence":      j.Fence,
		"owner":      j.Owner,
		"op":         op,
		"held_state": string(held),
		"guard":      guard,
	})...).Scan(
		&a.id, &a.no, &a.key, &a.msg.UserID, &a.msg.EventKey, &a.msg.Template, &a.msg.Data, &a.maybeSent)
	if errors.Is(err, pgx.ErrNoRows) {
		return attempt{}, fmt.Errorf("%w (job %d, fence %d)", errNotHeld, j.ID, j.Fence)
	}
	if err != nil {
		return attempt{}, fmt.Errorf("notify: begin %s attempt for job %d: %w", op, j.ID, pg.MapError(err))
	}
	return a, nil
}

func finishAttempt(ctx context.Context, db pg.Querier, id int64, outcome, effectID, detail string) error {
	if len(detail) > 2000 {
		detail = detail[:2000]
	}
	tag, err := db.Exec(ctx, sqlFinishAttempt, id, outcome, effectID, detail)
	if err != nil {
		return fmt.Errorf("notify: record outcome of attempt %d: %w", id, pg.MapError(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("notify: attempt %d already has its outcome", id)
	}
	return nil
}

func reviewQueue(ctx context.Context, db pg.Querier, after int64, limit int, kinds []string) ([]reviewItem, error) {
	rows, err := db.Query(ctx, sqlReviewQueue, after, limit, kinds)
	if err != nil {
		return nil, fmt.Errorf("notify: read review queue: %w", pg.MapError(err))
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reviewItem, error) {
		var it reviewItem
		var err error
		it.Task, err = scanTask(r, &it.UserID, &it.EventKey, &it.WaitingSince)
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("notify: read review queue: %w", pg.MapError(err))
	}
	return items, nil
}

func insertDecision(ctx context.Context, tx pgx.Tx, taskID int64, d Decision) (time.Time, error) {
	var at time.Time
	err := tx.QueryRow(ctx, sqlInsertDecision, taskID, d.Action, d.DecidedBy, d.Reason, d.JobFence).Scan(&at)
	if err != nil {
		return time.Time{}, fmt.Errorf("notify: record decision on task %d: %w", taskID, pg.MapError(err))
	}
	return at, nil
}

func scanPreferences(userID string, rows pgx.Rows) (Preferences, error) {
	p := Preferences{UserID: userID, Channels: map[string]bool{}}
	var ch, by string
	var on bool
	var at time.Time
	_, err := pgx.ForEachRow(rows, []any{&ch, &on, &at, &by}, func() error {
		p.Channels[ch] = on
		if at.After(p.UpdatedAt) {
			p.UpdatedAt, p.UpdatedBy = at, by
		}
		return nil
	})
	return p, err
}

func putPreferences(ctx context.Context, db pg.Querier, userID string, channels []string, enabled []bool, by string) (Preferences, error) {
	rows, err := db.Query(ctx, sqlPutPreferences, userID, channels, enabled, by)
	if err != nil {
		return Preferences{}, fmt.Errorf("notify: store preferences of %s: %w", userID, pg.MapError(err))
	}
	p, err := scanPreferences(userID, rows)
	if err != nil {
		return Preferences{}, fmt.Errorf("notify: store preferences of %s: %w", userID, pg.MapError(err))
	}
	return p, nil
}

func getPreferences(ctx context.Context, db pg.Querier, userID string) (Preferences, error) {
	rows, err := db.Query(ctx, sqlGetPreferences, userID)
	if err != nil {
		return Preferences{}, fmt.Errorf("notify: read preferences of %s: %w", userID, pg.MapError(err))
	}
	p, err := scanPreferences(userID, rows)
	if err != nil {
		return Preferences{}, fmt.Errorf("notify: read preferences of %s: %w", userID, pg.MapError(err))
	}
	if len(p.Channels) == 0 {
		return Preferences{}, fmt.Errorf("%w: %s", errUnknownUser, userID)
	}
	return p, nil
}

func seedPreferences(ctx context.Context, db pg.Querier, userID string, channels []string, enabled []bool) error {
	if _, err := db.Exec(ctx, sqlSeedPreferences, userID, channels, enabled); err != nil {
		return fmt.Errorf("notify: seed preferences of %s: %w", userID, pg.MapError(err))
	}
	return nil
}
