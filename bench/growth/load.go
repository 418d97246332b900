// Package growthbench is `fencelab bench growth`: it loads history into
// every growing table on a scratch database and measures, at empty and at
// that history, every periodic, per-scrape and per-request query whose
// cost must not grow with it (docs/DATA.md). Load is shared with the plan
// tests (e2e/growth), which assert the same probes' rows examined.
package growthbench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/notify"
	reportsvc "github.com/fencelab/fencelab/services/report"
	"github.com/fencelab/fencelab/services/shortlink"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/rel"
	"github.com/fencelab/fencelab/services/upload"
)

// The shape of the loaded state: what is history (n rows per table, inside
// the retention window, so no purge may touch it), what is purgeable
// (a few batches past the retention, the steady state of a purge that
// runs every slot) and what is live (the queue, a consumer's lag).
const (
	Retention       = 72 * time.Hour // every retention the probes use
	PurgeableRows   = 3 * 1000       // past the retention, per purged table
	LiveJobs        = 1000           // ready jobs
	ConsumerLag     = 100            // events after the consumer's position
	Consumer        = "growth.consumer"
	ConsumedTopic   = "growth.consumed"
	UnconsumedTopic = "growth.unconsumed"
	LinkCode        = "growth"
	Reader          = "growth-reader"
	Author          = "growth-author"
	historyKinds    = 4
	NotifyUser      = "growth-user"
	OldAuthor       = "growth-old-author"
	OldAuthorPosts  = 10 // all past the retention, fewer than feed.MinBackfillPosts
	ReportHolder    = "growth-report"
)

// LoadOptions shape Load.
type LoadOptions struct {
	// SkipFeed leaves the feed tables empty (the plan tests: a feed page
	// is a per-request read, measured by the benchmark).
	SkipFeed bool
	// Logf, if set, reports each step's rows and time.
	Logf func(format string, args ...any)
}

// Live is the live set the probes' bounds are judged against (the largest
// of the queue and the lag).
const Live = LiveJobs

// Load grows every growing table by n rows of history (jobs with two
// events each, outbox events of a consumed and an unconsumed topic with the
// consumer's inbox rows, clicks, notifications with their tasks, jobs and
// attempts, posts with their feed inbox rows, report days with their
// lease, grant, write, report and guard) and adds the purgeable slice
// and the live set, in bulk INSERT … SELECT generate_series statements,
// then VACUUM ANALYZE so plans see the tables as they are. The rows obey
// the claim, outbox, shortlink, notify, lease, report and FEED-I2
// invariants. n = 0 loads only the purgeable slice and the live set: the
// empty baseline.
func Load(ctx context.Context, db pg.Querier, n int, o LoadOptions) error {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ret := Retention.Microseconds()
	steps := []struct {
		name string
		sql  string
		args []any
	}{
		// Claim: finished jobs live in job_history, one partition per UTC
		// day (the engine creates them ahead; here every day the load
		// spans). Purgeable finished jobs first (oldest, on a day wholly
		// past the retention, so that claim.purge drops it), then history
		// spread over the whole UTC days inside 90% of the retention, then
		// the live queue. Whole days: a day holding only the last minutes
		// of the history (a load just after 16:10 UTC put 73 rows in one)
		// is a partition small enough for the planner to scan whole on
		// every probe of a nested loop, 500 probes deep in notify.purge,
		// and the plan test then counted 40,000 rows examined. Which day
		// got the sliver depended on the time of day the test ran.
		{"job history days", fmt.Sprintf(`
DO $$
DECLARE d date;
BEGIN
    FOR d IN SELECT generate_series(((now() - %d * interval '1 microsecond' - interval '26 hours') AT TIME ZONE 'UTC')::date,
                                    (now() AT TIME ZONE 'UTC')::date, interval '1 day')::date LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS %%I PARTITION OF job_history_days FOR VALUES FROM (%%L) TO (%%L)',
                       'job_history_d' || to_char(d, 'YYYYMMDD'), d::text || ' 00:00:00+00', (d + 1)::text || ' 00:00:00+00');
    END LOOP;
END $$`, ret), nil},
		{"jobs past retention", `
INSERT INTO job_history (id, kind, business_key, state, payload, due_at, created_at, updated_at, attempts, max_attempts, fence, owner)
SELECT nextval('job_id_seq'), 'growth.k' || (i % $3), 'old-' || i, 'succeeded', '{}', t, t, t, 1, 5, 1, 'growth'
  FROM generate_series(1, $1) i,
       -- Noon of a day wholly past the retention: the rows cannot straddle
       -- midnight into two partitions, one of them a sliver.
       LATERAL (SELECT (date_trunc('day', (now() - $2::bigint * interval '1 microsecond' - interval '25 hours') AT TIME ZONE 'UTC')
                        + interval '12 hours') AT TIME ZONE 'UTC' - i * interval '1 millisecond' AS t) x`,
			[]any{PurgeableRows, ret, historyKinds}},
		{"job history", `
WITH days AS (
    SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS today,
           (date_trunc('day', (now() - 0.9 * $2::bigint * interval '1 microsecond') AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC' AS first
)
INSERT INTO job_history (id, kind, business_key, state, payload, due_at, created_at, updated_at, attempts, max_attempts, fence, owner)
SELECT nextval('job_id_seq'), 'growth.k' || (i % $3), 'h-' || i, 'succeeded', '{}', t, t, t, 1, 5, 1, 'growth'
  FROM days, generate_series(1, $1) i,
       LATERAL (SELECT days.today - (i::float8 / ($1 + 1)) * (days.today - days.first) AS t) x`,
			[]any{n, ret, historyKinds}},
		{"job events", `
INSERT INTO job_event (job_id, event, fence, owner, state, at)
SELECT id, e.event, 1, 'growth', e.state, updated_at
  FROM job_history, (VALUES ('claimed', 'running'), ('succeeded', 'succeeded')) AS e(event, state)
 WHERE kind LIKE 'growth.k%'
 ORDER BY id, e.event`, nil},
		{"live jobs", `
INSERT INTO job (kind, business_key)
SELECT 'growth.live', 'live-' || i FROM generate_series(1, $1) i`, []any{LiveJobs}},

		// Outbox: old events of both topics, then history, then the
		// consumer at ConsumerLag events before the end of its topic,
		// with an inbox row for every event it passed (OUTBOX-I2).
		{"outbox events past retention", `
INSERT INTO outbox_event (topic, key, payload, created_at)
SELECT CASE WHEN i % 2 = 0 THEN $3 ELSE $4 END, 'k' || (i % 1000), '{"n":1}',
       now() - $2::bigint * interval '1 microsecond' - interval '1 hour'
  FROM generate_series(1, $1) i`, []any{2 * PurgeableRows, ret, ConsumedTopic, UnconsumedTopic}},
		{"outbox history", `
INSERT INTO outbox_event (topic, key, payload, created_at)
SELECT CASE WHEN i % 2 = 0 THEN $3 ELSE $4 END, 'k' || (i % 1000), '{"n":1}',
       now() - (0.9 * $2::bigint * (1 - i::float8 / ($1 + 1))) * interval '1 microsecond'
  FROM generate_series(1, $1) i`, []any{n, ret, ConsumedTopic, UnconsumedTopic}},
		{"outbox lag", `
INSERT INTO outbox_event (topic, key, payload)
SELECT $2, 'lag' || i, '{"n":1}' FROM generate_series(1, $1) i`, []any{ConsumerLag, ConsumedTopic}},
		{"outbox consumer", `
INSERT INTO outbox_consumer (name, topics, position_tx, position_id)
SELECT $1, ARRAY[$2], tx_id, id
  FROM outbox_event WHERE topic = $2 ORDER BY tx_id DESC, id DESC OFFSET $3 LIMIT 1`,
			[]any{Consumer, ConsumedTopic, ConsumerLag}},
		{"outbox inbox", `
INSERT INTO outbox_inbox (consumer, event_id, fence, processed_at)
SELECT c.name, e.id, 1, e.created_at
  FROM outbox_consumer c JOIN outbox_event e ON e.topic = ANY (c.topics) AND (e.tx_id, e.id) <= (c.position_tx, c.position_id)
 WHERE c.name = $1`, []any{Consumer}},

		// Short links: one link, old clicks, history, its counter.
		{"shortlink link", `
WITH l AS (INSERT INTO shortlink_links (code, target, owner, custom) VALUES ($1, 'https://example.test/growth', 'user-growth', true)
           RETURNING code, target, owner, created_at)
INSERT INTO shortlink_creations (code, target, owner, created_at) SELECT * FROM l`, []any{LinkCode}},
		{"clicks", `
INSERT INTO shortlink_clicks (id, code, clicked_at)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, $3,
       CASE WHEN i <= $4 THEN now() - $2::bigint * interval '1 microsecond' - interval '1 hour'
            ELSE now() - (0.9 * $2::bigint * random()) * interval '1 microsecond' END
  FROM generate_series(1, $1::int + $4::int) i`, []any{n, ret, LinkCode, PurgeableRows}},
		{"click counter", `
INSERT INTO shortlink_click_count (code, clicks) SELECT $1, count(*) FROM shortlink_clicks WHERE code = $1`, []any{LinkCode}},

		// Upload: sessions that ended without a file, a purgeable slice
		// past the retention and history inside it.
		{"upload sessions", `
INSERT INTO upload_session (id, owner, total_size, chunk_count, chunk_size, sha256, state, touched_at, ended_at)
SELECT ('00000000-0000-7000-9000-' || lpad(to_hex(i), 12, '0'))::uuid, 'user-growth', 0, 1, 0, repeat('0', 64), 'expired', t, t
  FROM generate_series(1, $1::int + $3::int) i,
       LATERAL (SELECT CASE WHEN i <= $3 THEN now() - $2::bigint * interval '1 microsecond' - interval '1 hour'
                            ELSE now() - (0.9 * $2::bigint * random()) * interval '1 microsecond' END AS t) x`,
			[]any{n, ret, PurgeableRows}},

		// Notifications: one user, notifications with one email task each
		// (its claim job finished, two job events, one successful send),
		// a purgeable slice past the retention and history inside it.
		{"notify user", `
INSERT INTO notify_user (user_id) VALUES ($1)`, []any{NotifyUser}},
		{"notify notifications", `
INSERT INTO notify_notification (user_id, event_key, template, submitted_by, created_at)
SELECT $3, 'growth-' || i, 'growth', 'growth',
       CASE WHEN i <= $4 THEN now() - $2::bigint * interval '1 microsecond' - interval '1 hour' - i * interval '1 millisecond'
            ELSE now() - (0.9 * $2::bigint * (1 - i::float8 / ($1 + $4 + 1))) * interval '1 microsecond' END
  FROM generate_series(1, $1::int + $4::int) i`, []any{n, ret, NotifyUser, PurgeableRows}},
		{"notify jobs", `
INSERT INTO job_history (id, kind, business_key, state, payload, due_at, created_at, updated_at, attempts, max_attempts, fence, owner, kept)
SELECT nextval('job_id_seq'), 'notify.email', 'notify-' || id || '-email', 'succeeded', '{}', created_at, created_at, created_at, 1, 5, 1, 'growth', true
  FROM notify_notification WHERE user_id = $1 ORDER BY id`, []any{NotifyUser}},
		{"notify job events", `
INSERT INTO job_event (job_id, event, fence, owner, state, at)
SELECT id, e.event, 1, 'growth', e.state, updated_at
  FROM job_history, (VALUES ('claimed', 'running'), ('succeeded', 'succeeded')) AS e(event, state)
 WHERE kind = 'notify.email' AND business_key LIKE 'notify-%'
 ORDER BY id, e.event`, nil},
		// Every job loaded above is its key's job (job_key, migration
		// 0615), as the engine's enqueue would have made it.
		{"job keys", `
INSERT INTO job_key (kind, business_key, job_id) SELECT kind, business_key, id FROM job_all`, nil},
		// Statistics first, so the joins below hash instead of looping.
		{"notify analyze", `ANALYZE job_history, notify_notification`, nil},
		{"notify tasks", `
INSERT INTO notify_task (notification_id, channel, job_id, created_at)
SELECT n.id, 'email', j.id, n.created_at
  FROM notify_notification n JOIN job_history j ON j.kind = 'notify.email' AND j.business_key = 'notify-' || n.id || '-email'
 WHERE n.user_id = $1`, []any{NotifyUser}},
		{"notify analyze tasks", `ANALYZE notify_task`, nil},
		{"notify attempts", `
INSERT INTO notify_attempt (task_id, attempt_no, op, fence, worker, key_sent, outcome, effect_id, started_at, finished_at)
SELECT t.id, 1, 'send', 1, 'growth', t.delivery_key, 'success', 'effect-' || t.id, t.created_at, t.created_at
  FROM notify_task t JOIN notify_notification n ON n.id = t.notification_id
 WHERE n.user_id = $1`, []any{NotifyUser}},

		// Report days (the lease chapter): one per day, each a lease
		// `report:YYYY-MM-DD` with its grant, one write, the report and
		// its fence guard, as the report job leaves them (LOCK-I1,
		// LOCK-I2). Days are consecutive from 2000-01-02; the first
		// PurgeableRows were granted past the retention (oldest first),
		// the n after them inside it.
		{"report leases", `
INSERT INTO lease (name, holder, fence, granted_at, expires_at)
SELECT 'report:' || to_char(date '2000-01-01' + i, 'YYYY-MM-DD'), $4, 1, t, t + interval '30 seconds'
  FROM generate_series(1, $1::int + $3::int) i,
       LATERAL (SELECT CASE WHEN i <= $3 THEN now() - $2::bigint * interval '1 microsecond' - interval '1 hour' - ($3 - i) * interval '1 millisecond'
                            ELSE now() - (0.9 * $2::bigint * (1 - (i - $3)::float8 / ($1 + 1))) * interval '1 microsecond' END AS t) x`,
			[]any{n, ret, PurgeableRows, ReportHolder}},
		{"report grants", `
INSERT INTO lease_grant (name, holder, fence, granted_at, expires_at)
SELECT name, holder, fence, granted_at, expires_at FROM lease WHERE holder = $1 ORDER BY granted_at`, []any{ReportHolder}},
		{"report outputs", `
INSERT INTO report_output (report_date, content, written_fence, written_by, written_at)
SELECT d, 'growth report', l.fence, l.holder, l.granted_at
  FROM generate_series(1, $1::int + $2::int) i, LATERAL (SELECT date '2000-01-01' + i AS d) x
  JOIN lease l ON l.name = 'report:' || to_char(d, 'YYYY-MM-DD')`, []any{n, PurgeableRows}},
		{"report writes", `
INSERT INTO report_write (report_date, fence, holder, written_at)
SELECT report_date, written_fence, written_by, written_at FROM report_output WHERE written_by = $1 ORDER BY report_date`, []any{ReportHolder}},
		{"report guards", `
INSERT INTO fence_guard (resource, lease_name, max_fence, holder, updated_at)
SELECT 'report_output:' || to_char(report_date, 'YYYY-MM-DD'), 'report:' || to_char(report_date, 'YYYY-MM-DD'),
       written_fence, written_by, written_at
  FROM report_output WHERE written_by = $1`, []any{ReportHolder}},

		// Feed: an author with n pushed posts inside the retention and a
		// purgeable slice past it, an author whose few posts are all past
		// it (FEED-I2's horizon: its newest posts leave the inbox too), a
		// reader who follows both and has every post in the inbox, and
		// the fan-out consumer past the follows.
		{"feed users", `
INSERT INTO social_user (user_id) VALUES ($1), ($2), ($3)`, []any{Author, Reader, OldAuthor}},
		{"feed follow", `
INSERT INTO social_relation (follower, followee, state, version, event_id, changed_tx)
VALUES ($1, $2, 'active', 1, 0, pg_current_xact_id()), ($1, $3, 'active', 1, 0, pg_current_xact_id())`,
			[]any{Reader, Author, OldAuthor}},
		{"feed posts", `
INSERT INTO social_post (author, visibility, body, created_at)
SELECT $2, 'PUBLIC', 'post ' || i,
       CASE WHEN i <= $4 THEN now() - $3::bigint * interval '1 microsecond' - interval '1 hour' - ($4 - i) * interval '1 millisecond'
            ELSE now() - (0.9 * $3::bigint * (1 - i::float8 / ($1 + $4 + 1))) * interval '1 microsecond' END
  FROM generate_series(1, greatest($1, 100) + $4) i`, []any{n, Author, ret, PurgeableRows}},
		{"feed old posts", `
INSERT INTO social_post (author, visibility, body, created_at)
SELECT $1, 'PUBLIC', 'old post ' || i, now() - $2::bigint * interval '1 microsecond' - i * interval '1 hour'
  FROM generate_series(1, $3) i`, []any{OldAuthor, ret, OldAuthorPosts}},
		{"feed settled posts", `
INSERT INTO social_feed_post (post_id, author, created_at, pushed)
SELECT post_id, author, created_at, true FROM social_post WHERE author IN ($1, $2) ORDER BY created_at, post_id`,
			[]any{Author, OldAuthor}},
		{"feed inbox", `
INSERT INTO social_feed_inbox (reader, created_at, post_id)
SELECT $1, created_at, post_id FROM social_feed_post WHERE author IN ($2, $3)`, []any{Reader, Author, OldAuthor}},
		{"feed fan-out consumer", `
INSERT INTO outbox_consumer (name, topics, position_tx, position_id)
VALUES ('social.feed.fanout', ARRAY['social.post', 'social.rel'], pg_current_xact_id(), 0)
ON CONFLICT (name) DO UPDATE SET position_tx = EXCLUDED.position_tx`, nil},
	}
	for _, s := range steps {
		if o.SkipFeed && strings.HasPrefix(s.name, "feed") {
			continue
		}
		begin := time.Now()
		tag, err := db.Exec(ctx, s.sql, s.args...)
		if err != nil {
			return fmt.Errorf("growth: load %s: %w", s.name, err)
		}
		logf("  loaded %-30s %9d rows in %v", s.name, tag.RowsAffected(), time.Since(begin).Round(time.Millisecond))
	}
	for _, t := range []string{"job", "job_event", "outbox_event", "outbox_inbox", "outbox_consumer",
		"shortlink_clicks", "shortlink_click_count", "upload_session", "social_post", "social_feed_post", "social_feed_inbox",
		"notify_notification", "notify_task", "notify_attempt",
		"lease", "lease_grant", "report_output", "report_write", "fence_guard"} {
		if _, err := db.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return fmt.Errorf("growth: vacuum %s: %w", t, err)
		}
	}
	return nil
}

// Probes are every periodic, per-scrape and per-request query of the
// loaded modules, with the arguments Load's state calls for, and the rows
// claim.purge's drop of each expired day reads (claim.DayProbes: Load
// puts the purgeable jobs on one such day).
func Probes(ctx context.Context, db pg.Querier) ([]pg.Probe, error) {
	var pos outbox.Position
	if err := db.QueryRow(ctx, `SELECT position_tx, position_id FROM outbox_consumer WHERE name = $1`, Consumer).
		Scan(&pos.TxID, &pos.ID); err != nil {
		return nil, fmt.Errorf("growth: consumer position: %w", err)
	}
	var ps []pg.Probe
	var kept []string // notify's kinds: their jobs go with their notifications (notify.purge)
	for _, ch := range notify.Channels {
		kept = append(kept, ch.Kind())
	}
	ps = append(ps, claim.GrowthProbes(Retention, kept)...)
	days, err := claim.DayProbes(ctx, db, Retention)
	if err != nil {
		return nil, fmt.Errorf("growth: %w", err)
	}
	ps = append(ps, days...)
	ps = append(ps, outbox.GrowthProbes(Retention, []string{ConsumedTopic}, pos)...)
	ps = append(ps, rel.GrowthProbes(Reader)...)
	ps = append(ps, shortlink.GrowthProbes(Retention, LinkCode)...)
	ps = append(ps, upload.GrowthProbes(Retention)...)
	ps = append(ps, notify.GrowthProbes(Retention)...)
	ps = append(ps, feed.GrowthProbes(Retention)...)
	ps = append(ps, reportsvc.GrowthProbes(Retention)...)
	return ps, nil
}
