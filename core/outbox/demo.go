package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
