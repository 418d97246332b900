// Package order is part B of the flash sale (chapter 7,
// docs/chapters/07-orders.md): orders on top of part A's reservations, paid
// through an uncertain payment channel. It answers three questions: when
// the charge call times out, was money taken (ORD-O2: the order stays
// PAYING and converges by query or close); when callbacks come
// duplicated, out of order or forged, can the order be corrupted (ORD-O1,
// O3, O5: every move is conditional and logged, every callback verified
// and deduplicated by the channel's event id); and when the money arrives
// after the hold was released, what happens to it (ORD-O4: a free unit is
// retaken, else the money is refunded, once).
//
// The inventory is reserve.Inventory, unchanged, used inside this
// package's transactions.
package order

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// Job kinds.
const (
	// ReconcileKind is the periodic job that asks the channel about
	// orders stuck in PAYING (and REFUNDING).
	reconcileKind = "flashsale.reconcile"
	// RefundKind refunds one late-paid order that found no unit.
	RefundKind = "flashsale.refund"
)

// Service is the order layer: orders, payment through the channel,
// callbacks, reconciliation and refunds.
type Service struct {
	cfg     Config
	pool    *pgxpool.Pool
	inv     *reserve.Inventory
	jobs    *claim.Client
	auth    *httpx.Auth
	keys    *idem.Keys
	channel Channel
	log     *slog.Logger
	m       *metrics
}

// NewService builds the order layer from the shared dependencies and its
// settings (LoadConfig), on inv, part A's inventory.
func NewService(d app.Deps, cfg Config, inv *reserve.Inventory) (*Service, error) {
	if len(cfg.CallbackSecret) == 0 {
		// The loopback channel and this process share a secret of the
		// process's own making.
		cfg.CallbackSecret = make([]byte, 32)
		rand.Read(cfg.CallbackSecret)
	}
	log := d.Logger()
	return &Service{
		cfg: cfg, pool: d.Pool, inv: inv, jobs: d.Jobs, auth: d.Auth, log: log,
		keys:    d.Keys(),
		channel: newChannel(cfg, log),
		m:       newMetrics(d.Registerer()),
	}, nil
}

// Config is the layer's configuration (with the callback secret in use).
func (s *Service) Config() Config { return s.cfg }

// Routes mounts the order routes.
func (s *Service) Routes(e *echo.Echo) { routes(e, &handlers{svc: s}, s.auth, s.keys) }

// Kinds are the layer's claim-engine job kinds. Reconciliation is
// periodic. Refunds are sent with the order's refund key, so a re-run
// after a lapsed lease or an unanswered call asks for the same refund and
// the channel makes at most one: the kind needs no "unknown" state, and a
// lapsed job simply runs again (as notify's keyed email channel does).
func (s *Service) Kinds() []claim.Kind {
	return []claim.Kind{
		{Name: reconcileKind, Every: s.cfg.ReconcileEvery, Handle: s.reconcileJob},
		// An order owed a refund points at its refund job (ORD-O4):
		// the job lives as long as the order.
		{Name: RefundKind, Handle: s.refundJob, MaxAttempts: s.cfg.RefundAttempts, KeepFinished: true},
	}
}

// Create orders the reservation for userID inside tx: one order per
// reservation (a unique constraint), so a retry returns the first order
// (created = false). Only the owner's HELD, unexpired reservation can be
// ordered.
func (s *Service) Create(ctx context.Context, tx pgx.Tx, userID string, reservationID int64) (o Order, created bool, err error) {
	if existing, found, err := orderByReservation(ctx, tx, reservationID); err != nil || found {
		if found && existing.UserID != userID {
			return Order{}, false, errNotOwner
		}
		return existing, false, err
	}
	r, err := s.inv.GetForUpdate(ctx, tx, reservationID)
	if err != nil {
		return Order{}, false, err
	}
	if r.UserID != userID {
		return Order{}, false, errNotOwner
	}
	now, err := dbNow(ctx, tx)
	if err != nil {
		return Order{}, false, err
	}
	if r.State != reserve.StateHeld || !r.ExpiresAt.After(now) {
		return Order{}, false, fmt.Errorf("%w: reservation %d is %s, expires %s", errReservationNotHeld, r.ID, r.State, r.ExpiresAt.Format("15:04:05"))
	}
	o, created, err = insertOrder(ctx, tx, r.ID, r.UserID, r.SKU, Price)
	if err != nil || created {
		return o, created, err
	}
	o, _, err = orderByReservation(ctx, tx, r.ID) // a concurrent create committed first
	return o, false, err
}

// Pay charges the order through the channel for p, its owner. No
// transaction spans the call: the order moves to PAYING and commits, then
// the channel is called with the order's charge key, then its answer is
// recorded and applied. An answer that says nothing definite leaves the
// order PAYING with its unit held (ORD-O2); the callback or
// reconciliation settles it.
func (s *Service) Pay(ctx context.Context, p httpx.Principal, id int64) (Order, error) {
	o, err := s.startPaying(ctx, p, id)
	if err != nil {
		return Order{}, err
	}
	// The call belongs to the order, not to the client's connection: a
	// client that leaves must not turn a charge in flight into a call
	// without an answer.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
	eff, callErr := s.channel.Create(callCtx, fakeprovider.CreateRequest{
		Key: o.ChargeKey(), Reference: o.PaymentRef, Amount: o.Amount,
		Data: map[string]any{"order": o.ID, "sku": o.SKU, "user": o.UserID},
	})
	cancel()
	ev := paymentEvent{Source: SourceCharge, Status: chargeStatus(callErr)}
	if callErr == nil {
		ev.Status, ev.EffectID, ev.Amount = eff.Status, eff.ID, &eff.Amount
	} else {
		ev.Detail = callErr.Error()
	}
	s.m.calls.WithLabelValues("charge", ev.Status).Inc()
	return s.record(context.WithoutCancel(ctx), o.ID, ev, "pay")
}

// startPaying moves a CREATED order to PAYING for its owner and commits.
// If the hold has ended the order closes instead (its unit returned now if
// the release job has not yet) and the answer is ErrHoldEnded.
func (s *Service) startPaying(ctx context.Context, p httpx.Principal, id int64) (Order, error) {
	var o Order
	var ended bool
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if o, err = lockOrder(ctx, tx, id); err != nil {
			return err
		}
		if o.UserID != p.Subject {
			return errNotOwner
		}
		switch o.State {
		case StateCreated:
		case StatePaying:
			return errPaymentInProgress
		default:
			return fmt.Errorf("%w: order %d is %s", errNotPayable, o.ID, o.State)
		}
		r, err := s.inv.GetForUpdate(ctx, tx, o.ReservationID)
		if err != nil {
			return err
		}
		now, err := dbNow(ctx, tx)
		if err != nil {
			return err
		}
		if r.State == reserve.StateHeld && r.ExpiresAt.After(now) {
			return s.mustMove(ctx, tx, o.ID, move{from: StateCreated, to: StatePaying, cause: "pay"})
		}
		ended = true
		m := move{from: StateCreated, to: StateClosed, cause: "pay: the hold ended before payment started"}
		if r.State == reserve.StateHeld {
			m.unit = "release"
		}
		if err := s.mustMove(ctx, tx, o.ID, m); err != nil {
			return err
		}
		if m.unit != "" {
			return mustMoveUnit(s.inv.Release(ctx, tx, r.ID))
		}
		return nil
	})
	if err == nil && ended {
		err = errHoldEnded
	}
	return o, err
}

// record stores one report of the channel about order id and applies it,
// in one transaction with the order locked; it returns the order after.
func (s *Service) record(ctx context.Context, id int64, ev paymentEvent, cause string) (Order, error) {
	var o Order
	err := pg.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if o, err = lockOrder(ctx, tx, id); err != nil {
			return err
		}
		if ev.ID, _, err = insertEvent(ctx, tx, o.ID, ev, nil); err != nil {
			return err
		}
		_, err = s.apply(ctx, tx, o, ev, cause)
		return err
	})
	if err != nil {
		return Order{}, err
	}
	return getOrder(ctx, s.pool, id)
}

// View reads an order with its transitions and payment events for p: its
// owner or an admin.
func (s *Service) View(ctx context.Context, p httpx.Principal, id int64) (View, error) {
	o, err := getOrder(ctx, s.pool, id)
	if err != nil {
		return View{}, err
	}
	if !p.CanActFor(o.UserID) {
		return View{}, errNotOwner
	}
	v := View{Order: o}
	if v.Transitions, err = transitions(ctx, s.pool, id); err != nil {
		return View{}, err
	}
	if v.PaymentEvents, err = paymentEvents(ctx, s.pool, id); err != nil {
		return View{}, err
	}
	return v, nil
}

type metrics struct {
	moves     *prometheus.CounterVec
	calls     *prometheus.CounterVec
	callbacks *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		moves: promx.CounterVec(reg, "fencelab_flashsale_order_moves_total",
			"Order moves by target state, applied or refused (ORD-O1).", "to", "applied"),
		calls: promx.CounterVec(reg, "fencelab_flashsale_payment_calls_total",
			"Payment channel calls by operation and recorded status (unknown: no answer).", "op", "status"),
		callbacks: promx.CounterVec(reg, "fencelab_flashsale_payment_callbacks_total",
			"Payment callbacks by outcome (applied, duplicate, forged, stale, malformed, conflict, unknown_order, mismatch).", "outcome"),
	}
	return m
}

func refundJobKey(orderID int64) string { return "order:" + strconv.FormatInt(orderID, 10) }

type refundPayload struct {
	OrderID int64 `json:"order_id"`
}
