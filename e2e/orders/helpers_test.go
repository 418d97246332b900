// Package orders_test runs the experiments of spec 30 Part B (orders and
// an uncertain payment channel) against the real app, real PostgreSQL and
// a real fake payment channel on loopback. The channel's effect ledger is
// the ground truth for "money taken" and "refunded once".
package orders_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/flashsale"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// secret signs the channel's callbacks in every experiment.
const secret = "orders-e2e-callback-secret-0042"

const sku = flashsale.DemoSKU

// lab is the app plus its payment channel.
type lab struct {
	*e2etest.App
	pay *fakeprovider.Server
}

// start runs a payment channel that settles only when the test says so
// (the payment network's answer is the experiment's to time) and the app
// pointed at it, with reconciliation looking at every PAYING order at
// once. settings override FENCELAB_FLASHSALE_* for this app.
func start(t *testing.T, settings map[string]string) *lab {
	t.Helper()
	srv, err := fakeprovider.Start(fakeprovider.Capabilities{
		Name: "pay", IdempotencyKeys: true, Query: true, Close: true, Refund: true,
		Async: true, ManualSettle: true, CallbackSecret: []byte(secret),
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	s := map[string]string{
		order.EnvPayURL: srv.URL(), order.EnvCallbackSecret: secret, order.EnvReconcileAfter: "0s",
	}
	for k, v := range settings {
		s[k] = v
	}
	a := e2etest.Start(t, e2etest.Options{Settings: s})
	for _, m := range a.Mods {
		if m.Name == "flashsale" {
			require.NoError(t, m.Seed(context.Background()))
		}
	}
	srv.SetCallbackURL(a.URL + order.CallbackPath)
	return &lab{App: a, pay: srv}
}

func (l *lab) user(t *testing.T, sub string) string { return l.Token(t, sub, httpx.RoleUser) }
func (l *lab) admin(t *testing.T) string            { return l.Token(t, "admin-0001", httpx.RoleAdmin) }

// addSKU puts units of sku on sale through part A's inventory (a sale
// small enough to sell out in one line of a test).
func (l *lab) addSKU(t *testing.T, sku string, units int) {
	t.Helper()
	_, err := reserve.NewInventory(reserve.InventoryOptions{}).CreateSKU(context.Background(), l.Pool, sku, units)
	require.NoError(t, err)
}

// reserve holds a unit of sku for the token's user.
func (l *lab) reserve(t *testing.T, tok, sku, key string) reserve.Reservation {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok,
		Body: reserve.ReserveRequest{SKU: sku, RequestKey: key}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var res reserve.Reservation
	r.JSON(t, &res)
	return res
}

// order creates the order of a reservation.
func (l *lab) order(t *testing.T, tok string, reservationID int64) order.Order {
	t.Helper()
	r := l.Do(t, createReq(tok, reservationID, nil))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var o order.Order
	r.JSON(t, &o)
	require.Equal(t, order.StateCreated, o.State)
	return o
}

func createReq(tok string, reservationID int64, headers map[string]string) e2etest.Req {
	return e2etest.Req{Method: http.MethodPost, Path: "/flashsale/orders", Token: tok, Headers: headers,
		Body: order.CreateRequest{ReservationID: reservationID}}
}

func payReq(tok string, id int64) e2etest.Req {
	return e2etest.Req{Method: http.MethodPost, Path: "/flashsale/orders/" + itoa(id) + "/pay", Token: tok}
}

// payPending pays an order whose charge the channel accepts and leaves
// pending, and returns the charge (the ledger's row).
func (l *lab) payPending(t *testing.T, tok string, id int64) fakeprovider.Effect {
	t.Helper()
	r := l.Do(t, payReq(tok, id))
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	var o order.Order
	r.JSON(t, &o)
	require.Equal(t, order.StatePaying, o.State)
	e := l.charge(t, o)
	require.Equal(t, fakeprovider.StatusPending, e.Status)
	require.Equal(t, e.ID, o.EffectID, "the pay answer names the charge")
	return e
}

// charge is the order's one charge in the channel's ledger.
func (l *lab) charge(t *testing.T, o order.Order) fakeprovider.Effect {
	t.Helper()
	effects := l.pay.EffectsFor(o.PaymentRef)
	require.Len(t, effects, 1, "one charge per order, whatever was retried")
	require.Equal(t, o.ChargeKey(), effects[0].Key)
	require.Equal(t, order.Price, effects[0].Amount)
	return effects[0]
}

// view reads GET /flashsale/orders/{id}.
func (l *lab) view(t *testing.T, tok string, id int64) order.View {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: http.MethodGet, Path: "/flashsale/orders/" + itoa(id), Token: tok})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v order.View
	r.JSON(t, &v)
	return v
}

// reconcile runs POST /flashsale/admin/reconcile once.
func (l *lab) reconcile(t *testing.T) order.ReconcileResult {
	t.Helper()
	r := l.Do(t, e2etest.Req{Method: http.MethodPost, Path: "/flashsale/admin/reconcile", Token: l.admin(t)})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var res order.ReconcileResult
	r.JSON(t, &res)
	return res
}

// settle is the payment network answering: the channel settles the charge
// and its callback has been delivered (or given up) when settle returns.
func (l *lab) settle(t *testing.T, effectID, status string) {
	t.Helper()
	require.NoError(t, l.pay.Settle(effectID, status))
	l.pay.WaitCallbacks()
}

// expireHold forces a hold past its expiry (the boundary, by SQL) and runs
// the release, which returns its unit.
func (l *lab) expireHold(t *testing.T, reservationID int64) {
	t.Helper()
	_, err := l.Pool.Exec(context.Background(),
		`UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE id = $1`, reservationID)
	require.NoError(t, err)
	r := l.Do(t, e2etest.Req{Method: http.MethodPost, Path: "/flashsale/admin/release-expired", Token: l.admin(t)})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.JSONEq(t, `{"released":1}`, string(r.Body))
}

// runRefundJobs claims and runs every due refund job once.
func (l *lab) runRefundJobs(t *testing.T) []*claim.Job {
	t.Helper()
	ctx := context.Background()
	jobs, err := l.Deps.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{order.RefundKind}, Limit: 10})
	require.NoError(t, err)
	for _, j := range jobs {
		require.NoError(t, l.Deps.Jobs.Execute(ctx, j))
	}
	return jobs
}

// callback posts a body to the callback route with a signature header.
func (l *lab) callback(t *testing.T, body []byte, signature string) e2etest.Response {
	t.Helper()
	h := map[string]string{}
	if signature != "" {
		h[fakeprovider.SignatureHeader] = signature
	}
	return l.Do(t, e2etest.Req{Method: http.MethodPost, Path: order.CallbackPath, Body: body, Headers: h})
}

// forgedCallback is callback for a signature made to be refused: the
// request breaks the contract on purpose, so only its answer is checked.
func (l *lab) forgedCallback(t *testing.T, body []byte, signature string) e2etest.Response {
	t.Helper()
	h := map[string]string{}
	if signature != "" {
		h[fakeprovider.SignatureHeader] = signature
	}
	return l.Do(t, e2etest.Req{Method: http.MethodPost, Path: order.CallbackPath, Body: body, Headers: h, Invalid: true})
}

// signedCallback is a callback the channel could send, signed now.
func signedCallback(t *testing.T, id, typ string, e fakeprovider.Effect) ([]byte, string) {
	t.Helper()
	body, err := json.Marshal(fakeprovider.Callback{ID: id, Type: typ, Created: time.Now().UTC(), Effect: e})
	require.NoError(t, err)
	return body, fakeprovider.Sign([]byte(secret), time.Now(), body)
}

// delivery is one callback as the channel sent it.
type delivery struct {
	body      []byte
	signature string
}

// capture points the channel's callbacks at a recorder instead of the app
// (answering 200, as the app would), so the experiment can deliver them
// itself: duplicated, shuffled, replayed. restore points them back.
func (l *lab) capture(t *testing.T) (got func() []delivery, restore func()) {
	t.Helper()
	var mu sync.Mutex
	var ds []delivery
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		ds = append(ds, delivery{body: b, signature: r.Header.Get(fakeprovider.SignatureHeader)})
		mu.Unlock()
	}))
	t.Cleanup(rec.Close)
	l.pay.SetCallbackURL(rec.URL)
	return func() []delivery {
			l.pay.WaitCallbacks()
			mu.Lock()
			defer mu.Unlock()
			return append([]delivery(nil), ds...)
		}, func() {
			l.pay.SetCallbackURL(l.URL + order.CallbackPath)
		}
}

// assertSettled is what every experiment ends with: the flash sale's
// invariants (FS-R* and ORD-*), and the money equation against the
// channel's ledger — for every order, what we recorded as charged and
// refunded is what the channel's ledger holds for its reference, each
// charge refunded at most once, and Σ(charged − refunded) = 1990 ×
// confirmed orders.
func (l *lab) assertSettled(t *testing.T) {
	t.Helper()
	invariant.Assert(t, l.Pool, "flashsale")
	refunds := map[string]int{}
	for _, rf := range l.pay.Refunds() {
		refunds[rf.EffectID]++
	}
	rows, err := l.Pool.Query(context.Background(), `SELECT id, pay_ref, state, charged, refunded FROM flashsale_order ORDER BY id`)
	require.NoError(t, err)
	type row struct {
		id                int64
		ref, state        string
		charged, refunded int64
	}
	orders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var o row
		return o, r.Scan(&o.id, &o.ref, &o.state, &o.charged, &o.refunded)
	})
	require.NoError(t, err)
	var net, confirmed int64
	for _, o := range orders {
		var taken, returned int64
		for _, e := range l.pay.EffectsFor(o.ref) {
			if e.Status == fakeprovider.StatusSucceeded || e.Status == fakeprovider.StatusRefunded {
				taken += e.Amount
			}
			returned += e.Refunded
			require.LessOrEqual(t, refunds[e.ID], 1, "order %d: charge %s refunded more than once", o.id, e.ID)
		}
		require.Equal(t, taken, o.charged, "order %d (%s): charged vs the channel's ledger", o.id, o.state)
		require.Equal(t, returned, o.refunded, "order %d (%s): refunded vs the channel's ledger", o.id, o.state)
		net += taken - returned
		if order.State(o.state).Confirmed() {
			confirmed++
		}
	}
	require.Equal(t, order.Price*confirmed, net, "Σ(charged − refunded) over the ledger = 1990 × confirmed orders")
}

// snapshot renders every row the experiments' "nothing changes" is about
// (the inbox's delivery counts aside) and the channel's ledger.
func (l *lab) snapshot(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	for _, q := range []string{
		`SELECT id, state, effect_id, charged, refunded, charge_event_id, refund_event_id, paid_outbox_id, updated_at FROM flashsale_order ORDER BY id`,
		`SELECT id, order_id, from_state, to_state, applied FROM flashsale_order_transition ORDER BY id`,
		`SELECT id, order_id, source, provider_event_id, status FROM flashsale_payment_event ORDER BY id`,
		`SELECT id, state, expires_at, confirmed_at, released_at, retaken_at FROM flashsale_reservation ORDER BY id`,
		`SELECT sku, available FROM flashsale_sku ORDER BY sku`,
		`SELECT count(*) FROM flashsale_stock_move`,
		`SELECT id, topic, key FROM outbox_event ORDER BY id`,
		`SELECT id, kind, state FROM job WHERE kind LIKE 'flashsale.%' ORDER BY id`,
	} {
		rows, err := l.Pool.Query(context.Background(), q)
		require.NoError(t, err)
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		require.NoError(t, err)
		fmt.Fprintf(&sb, "%s\n%v\n", q, all)
	}
	fmt.Fprintf(&sb, "ledger %+v\nrefunds %+v\n", l.pay.Effects(), l.pay.Refunds())
	return sb.String()
}

// count runs a counting query.
func (l *lab) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, l.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// applied lists an order's applied moves as "FROM→TO".
func applied(v order.View) []string {
	var out []string
	for _, tr := range v.Transitions {
		if tr.Applied {
			out = append(out, string(tr.From)+"→"+string(tr.To))
		}
	}
	return out
}

// units lists the inventory changes committed with an order's moves.
func units(v order.View) []string {
	var out []string
	for _, tr := range v.Transitions {
		if tr.Unit != "" {
			out = append(out, tr.Unit)
		}
	}
	return out
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// paidEvents counts the order_paid outbox events of an order.
func (l *lab) paidEvents(t *testing.T, id int64) int {
	return l.count(t, `SELECT count(*) FROM outbox_event WHERE topic = $1 AND key = $2`, order.TopicOrderPaid, itoa(id))
}

func (l *lab) reservation(t *testing.T, id int64) reserve.Reservation {
	t.Helper()
	r, err := reserve.NewInventory(reserve.InventoryOptions{}).Get(context.Background(), l.Pool, id)
	require.NoError(t, err)
	return r
}

// slowCreates is a proxy in front of the channel that holds every charge
// request until land is called, then forwards it — after its caller has
// given up, as a slow network would. Everything else passes straight
// through.
type slowCreates struct {
	srv    *httptest.Server
	target atomic.Value // string: the channel's URL
	gate   chan struct{}
	once   sync.Once
	seen   chan struct{} // closed when the first charge request arrived
	saw    sync.Once
	landed sync.WaitGroup
}

func newSlowCreates(t *testing.T) *slowCreates {
	s := &slowCreates{gate: make(chan struct{}), seen: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/effects" {
			s.landed.Add(1)
			defer s.landed.Done()
			s.saw.Do(func() { close(s.seen) })
			<-s.gate
		}
		req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method,
			s.target.Load().(string)+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(func() { s.once.Do(func() { close(s.gate) }); s.srv.Close() })
	return s
}

func (s *slowCreates) URL() string          { return s.srv.URL }
func (s *slowCreates) to(channelURL string) { s.target.Store(channelURL) }

// land lets the held charges through (once one has arrived) and waits
// until they reached the channel.
func (s *slowCreates) land(t *testing.T) {
	select {
	case <-s.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("no charge request reached the proxy")
	}
	s.once.Do(func() { close(s.gate) })
	s.landed.Wait()
}
