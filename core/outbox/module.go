package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
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
			cs = append(cs, newLagCollector(d.Pool))
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
	retention := app.EnvDuration("FENCELAB_OUTBOX_RETENTION", DefaultRetention)
	if retention < time.Minute {
		return app.Module{}, fmt.Errorf("outbox: FENCELAB_OUTBOX_RETENTION must be at least 1m, got %s", retention)
	}
	m.Tasks = append(m.Tasks, app.Task{Name: "purge", Run: func(ctx context.Context) error {
		return PurgeEvery(ctx, d.Pool, retention, min(retention/24, 10*time.Minute), d.Log)
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
// topic has passed, and those consumers' inbox rows, in batches; it
// returns how many events it deleted. A consumer that is registered but
// not running holds its topics' events until it catches up (its lag is
// visible), and a position rewound past a purged event cannot bring it
// back.
func Purge(ctx context.Context, db pg.Querier, retention time.Duration) (int64, error) {
	cutoff := time.Now().Add(-retention)
	var total int64
	for {
		tag, err := db.Exec(ctx, sqlPurge, cutoff, PurgeBatch)
		if err != nil {
			return total, fmt.Errorf("outbox: purge: %w", pg.MapError(err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < PurgeBatch {
			return total, nil
		}
	}
}

// PurgeEvery runs Purge now and every interval until ctx ends. A ticker
// for now; a claim-engine periodic job can call Purge instead.
func PurgeEvery(ctx context.Context, db pg.Querier, retention, interval time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := Purge(ctx, db, retention); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("outbox purge failed", "err", err)
		} else if n > 0 {
			log.Info("outbox purge", "deleted", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
