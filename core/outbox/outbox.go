// Package outbox is the transactional outbox with gap-safe consumers
// (chapter 4, docs/chapters/04-outbox.md).
//
// A module appends events inside its business transaction:
//
//	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
//		if err := store.Follow(ctx, tx, a, b); err != nil {
//			return err
//		}
//		_, err := outbox.Append(ctx, tx, "social.rel", a+">"+b, relEvent{Version: v, State: "active"})
//		return err
//	})
//
// and consumes them with a runner, as one of its app.Tasks:
//
//	c := outbox.Consumer{
//		Name:   "social.followers",
//		Topics: []string{"social.rel"},
//		Handle: func(ctx context.Context, tx pgx.Tx, ev outbox.Event) error {
//			return store.ApplyIfNewer(ctx, tx, ev) // the effect, in the inbox's transaction
//		},
//	}
//	task, err := app.ConsumerTask(d, c) // in the module's Build
//
// Guarantees:
//
//   - Order: events are delivered in (tx_id, id) order — by the appending
//     transaction's xid8, then by append order within it. A transaction
//     that commits before another makes its first write is delivered
//     first; overlapping transactions may come in either order, so writers
//     that overlap on a key carry a per-key version (REL-I3).
//   - No gaps: a consumer reads only events whose transaction id is below
//     pg_snapshot_xmin(pg_current_snapshot()), the oldest transaction still
//     running. Every transaction below it has ended, so no event can appear
//     later behind the position: an event whose transaction commits after a
//     higher-numbered one is never skipped (TestOutboxDoesNotSkipLateCommits).
//     The price: an open write transaction anywhere in the cluster holds
//     delivery back until it ends.
//   - Exactly-once effects: the effect, the inbox row (consumer, event_id)
//     and the position advance commit in one transaction, conditional on
//     the consumer's lease fence. A redelivered event (a reset position, a
//     replay) finds its inbox row and is skipped; a runner that lost its
//     lease cannot advance the position or apply anything.
//   - Several processes may run the same consumer: the consumer row is a
//     lease; one runner holds it at a time, the others wait for it to be
//     released or expire (TestOutboxTwoConsumerProcesses).
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// Event is one appended event as a consumer sees it.
type Event struct {
	ID      int64
	TxID    uint64 // the appending transaction's xid8: see Position and pg_visible_in_snapshot
	Topic   string
	Key     string
	Payload json.RawMessage
	Created time.Time
}

// Position is how far a consumer has read: every event on its topics with
// (TxID, ID) <= (Position.TxID, Position.ID) has been applied (OUTBOX-I2).
// After an empty read it is (horizon, 0): "everything below the horizon".
type Position struct {
	TxID uint64
	ID   int64
}

// Covers reports whether ev is at or before the position.
func (p Position) Covers(ev Event) bool {
	return ev.TxID < p.TxID || (ev.TxID == p.TxID && ev.ID <= p.ID)
}

func (p Position) less(q Position) bool {
	return p.TxID < q.TxID || (p.TxID == q.TxID && p.ID < q.ID)
}

// Message is one event to append with AppendMany.
type Message struct {
	Topic   string
	Key     string
	Payload any
}

var (
	nameRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
	// ErrInvalid reports a topic, key or payload the outbox refuses.
	ErrInvalid = errors.New("outbox: invalid event")
)

// MaxKeyLen bounds an event key.
const MaxKeyLen = 256

// Append writes one event inside tx, the caller's business transaction: it
// becomes visible to consumers when, and only if, tx commits. payload is
// marshalled as JSON ([]byte and json.RawMessage are taken as JSON text).
func Append(ctx context.Context, tx pgx.Tx, topic, key string, payload any) (int64, error) {
	p, err := encode(topic, key, payload)
	if err != nil {
		return 0, err
	}
	var id int64
	if err := tx.QueryRow(ctx, sqlAppend, topic, key, p).Scan(&id); err != nil {
		return 0, fmt.Errorf("outbox: append %s: %w", topic, pg.MapError(err))
	}
	return id, nil
}

// Queue is Append for a caller that does not need the event's id. On a
// transaction that can defer statements (pg.Deferrer: the effect
// transactions of core/idem), the INSERT travels with the transaction's
// next round trip — typically its COMMIT — instead of taking one of its
// own; an error then fails that round trip and the transaction with it.
// Either way the event commits with tx or not at all.
func Queue(ctx context.Context, tx pgx.Tx, topic, key string, payload any) error {
	p, err := encode(topic, key, payload)
	if err != nil {
		return err
	}
	if err := pg.ExecOrDefer(ctx, tx, sqlAppend, topic, key, p); err != nil {
		return fmt.Errorf("outbox: append %s: %w", topic, pg.MapError(err))
	}
	return nil
}

// AppendMany writes msgs in order in one statement (feed fan-out, bulk
// imports) and returns their ids.
func AppendMany(ctx context.Context, tx pgx.Tx, msgs []Message) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	topics, keys, payloads := make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs))
	for i, m := range msgs {
		p, err := encode(m.Topic, m.Key, m.Payload)
		if err != nil {
			return nil, err
		}
		topics[i], keys[i], payloads[i] = m.Topic, m.Key, string(p)
	}
	rows, err := tx.Query(ctx, sqlAppendMany, topics, keys, payloads)
	if err != nil {
		return nil, fmt.Errorf("outbox: append %d events: %w", len(msgs), pg.MapError(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("outbox: append %d events: %w", len(msgs), pg.MapError(err))
	}
	return ids, nil
}

// MarkApplied records, in c's inbox, every event tx itself appended on c's
// topics: the caller applied their effect in tx (a bulk load that writes
// the truth and its derived rows together), so c skips them as
// redeliveries instead of applying them a second time. c must be
// registered (Register) first.
func MarkApplied(ctx context.Context, tx pgx.Tx, c Consumer) (int64, error) {
	tag, err := tx.Exec(ctx, sqlMarkApplied, c.Name, c.Topics)
	if err != nil {
		return 0, fmt.Errorf("outbox: mark applied for %s: %w", c.Name, pg.MapError(err))
	}
	return tag.RowsAffected(), nil
}

func encode(topic, key string, payload any) ([]byte, error) {
	if !nameRE.MatchString(topic) {
		return nil, fmt.Errorf("%w: topic %q", ErrInvalid, topic)
	}
	if key == "" || len(key) > MaxKeyLen {
		return nil, fmt.Errorf("%w: key must be 1..%d bytes", ErrInvalid, MaxKeyLen)
	}
	var b []byte
	switch p := payload.(type) {
	case json.RawMessage:
		b = p
	case []byte:
		b = p
	default:
		var err error
		if b, err = json.Marshal(payload); err != nil {
			return nil, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
		}
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: payload is not JSON", ErrInvalid)
	}
	return b, nil
}

// LockPosition locks the consumer's row inside tx — waiting for a batch in
// progress, and holding further batches off until tx ends — and returns its
// position. A recompute that must not race the consumer (LIKE-04) runs in
// that transaction. To know exactly which events a recompute counted,
// record pg_current_snapshot() with its result instead: an event was
// counted iff pg_visible_in_snapshot(event's tx_id, that snapshot).
func LockPosition(ctx context.Context, tx pgx.Tx, consumer string) (Position, error) {
	var p Position
	if err := tx.QueryRow(ctx, sqlLockForRecompute, consumer).Scan(&p.TxID, &p.ID); err != nil {
		return Position{}, fmt.Errorf("outbox: lock consumer %s: %w", consumer, pg.MapError(err))
	}
	return p, nil
}
