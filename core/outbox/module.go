package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
)

// Module is core/outbox in the deployable: GET /outbox/consumers (admin),
// the lag metrics, and — with FENCELAB_OUTBOX_DEMO=1 — the demo consumer
// the two-process experiment and the benchmark run. Modules run their own
// consumers through Task.
func Module(d app.Deps) (app.Module, error) {
	if d.Metrics != nil {
		cs := []prometheus.Collector{metricApplied, metricRedelivered, metricAcquired, metricLost, metricBatch}
		if d.Pool != nil {
			cs = append(cs, newLagCollector(d.Pool, d.Log))
		}
		for _, c := range cs {
			if err := d.Metrics.Register(c); err != nil {
				return app.Module{}, fmt.Errorf("outbox: register metrics: %w", err)
			}
		}
	}
	m := app.Module{
		Name: "outbox",
		Routes: func(e *echo.Echo) {
			e.GET("/outbox/consumers", consumersHandler(d.Pool), d.Auth.Require(httpx.RoleAdmin))
		},
	}
	retention := DefaultRetention
	r := app.NewSettingsReader(d.Config, "outbox")
	r.Duration("FENCELAB_OUTBOX_RETENTION", &retention, time.Minute, 366*24*time.Hour)
	if err := r.Err(); err != nil {
		return app.Module{}, err
	}
	// The purge is a periodic claim job: one run per slot across processes.
	m.Kinds = append(m.Kinds, claim.Kind{Name: "outbox.purge", Every: min(retention/24, 10*time.Minute),
		Handle: func(ctx context.Context, j *claim.Job) error {
			n, err := Purge(ctx, d.Pool, retention)
			if err == nil {
				err = j.SetResult(map[string]int64{"deleted": n})
			}
			return err
		}})
	if app.EnvBool("FENCELAB_OUTBOX_DEMO", false) {
		t, err := Task(d, DemoConsumer())
		if err != nil {
			return app.Module{}, err
		}
		m.Tasks = append(m.Tasks, t)
	}
	return m, nil
}

// Task runs c in this process as a background task. Every process that
// runs it competes for the consumer's lease; one applies events at a time.
func Task(d app.Deps, c Consumer) (app.Task, error) {
	r, err := NewRunner(d.Pool, c, Options{Faults: d.Faults, Log: d.Log})
	if err != nil {
		return app.Task{}, err
	}
	return app.Task{Name: "outbox:" + c.Name, Run: r.Run}, nil
}

// Lease identifies the runner applying a batch.
type Lease struct {
	Owner string
	Fence int64
}

type leaseKey struct{}

// LeaseOf returns the lease under which the current batch runs (from a
// handler's context); zero outside a batch.
func LeaseOf(ctx context.Context) Lease {
	l, _ := ctx.Value(leaseKey{}).(Lease)
	return l
}

// Demo topic and consumer: events {"n": …} whose effect is one row in
// outbox_demo_effect, stamped with the runner's owner and fence.
const (
	DemoTopic        = "outbox.demo"
	DemoConsumerName = "outbox.demo"
)

// DemoPayload is the demo event's body.
type DemoPayload struct {
	N int64 `json:"n"`
}

const sqlDemoEffect = `
INSERT INTO outbox_demo_effect (event_id, key, n, owner, fence)
SELECT id, key, n, $4, $5
  FROM unnest($1::bigint[], $2::text[], $3::bigint[]) WITH ORDINALITY AS e(id, key, n, ord)
 ORDER BY ord`

// DemoConsumer applies demo events in batches: one multi-row insert per
// batch, in delivery order (the seq column records that order).
func DemoConsumer() Consumer {
	return Consumer{
		Name:   DemoConsumerName,
		Topics: []string{DemoTopic},
		HandleBatch: func(ctx context.Context, tx pgx.Tx, evs []Event) error {
			ids, keys, ns := make([]int64, len(evs)), make([]string, len(evs)), make([]int64, len(evs))
			for i, ev := range evs {
				var p DemoPayload
				if err := json.Unmarshal(ev.Payload, &p); err != nil {
					return fmt.Errorf("outbox demo: event %d: %w", ev.ID, err)
				}
				ids[i], keys[i], ns[i] = ev.ID, ev.Key, p.N
			}
			l := LeaseOf(ctx)
			_, err := tx.Exec(ctx, sqlDemoEffect, ids, keys, ns, l.Owner, l.Fence)
			return err
		},
	}
}

// DefaultRetention is how long processed events are kept (for replays,
// audits and late consumers) before the purge may delete them.
const DefaultRetention = 7 * 24 * time.Hour

// PurgeBatch bounds one purge statement.
const PurgeBatch = 1000

// Purge deletes events older than retention that every consumer of their
// topic has passed — and those of topics nobody consumes — with the
// consumers' inbox rows, then the demo consumer's effects older than
// retention, in batches; it returns how many events it deleted. A
// consumer that is registered but not running holds its topics' events
// until it catches up (its lag is visible), and a position rewound past a
// purged event cannot bring it back.
func Purge(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	var total int64
	for _, q := range []string{sqlPurge, sqlPurgeDemo} {
		for {
			tag, err := db.Exec(ctx, q, retention.Microseconds(), PurgeBatch)
			if err != nil {
				return total, fmt.Errorf("outbox: purge: %w", pg.MapError(err))
			}
			if q == sqlPurge {
				total += tag.RowsAffected()
			}
			if tag.RowsAffected() < PurgeBatch {
				break
			}
		}
	}
	return total, nil
}

// GrowthProbes are the outbox's periodic, per-scrape and per-batch
// queries for the plan tests and `fencelab bench growth`. topics and the
// position are a consumer's (the batch read and idle peek run every poll).
func GrowthProbes(retention time.Duration, topics []string, pos Position) []pg.Probe {
	return []pg.Probe{
		{Name: "outbox.purge batch", When: pg.Periodic, SQL: sqlPurge,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch)},
		{Name: "outbox.purge demo batch", When: pg.Periodic, SQL: sqlPurgeDemo,
			Args: []any{retention.Microseconds(), PurgeBatch}, Bound: pg.Batch(PurgeBatch)},
		{Name: "outbox consumer status (lag)", When: pg.PerScrape, SQL: sqlStatus, Bound: pg.Live},
		{Name: "outbox consumer read batch", When: pg.Periodic, SQL: sqlRead,
			Args: []any{topics, pos.TxID, pos.ID, 100}, Bound: pg.Batch(100)},
		{Name: "outbox consumer idle peek", When: pg.Periodic, SQL: sqlPeek,
			Args: []any{topics, pos.TxID, pos.ID}, Bound: pg.Batch(1)},
		{Name: "outbox last event", When: pg.PerRequest, SQL: sqlLastEvent,
			Args: []any{topics}, Bound: pg.Batch(1)},
	}
}
