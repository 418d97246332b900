package orders

// The kit the orders chapter's experiments drive the app with — a real fake
// payment channel on loopback whose effect ledger is the ground truth for
// "money taken" and "refunded once". The e2e tests use it too.

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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/flashsale/order"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// LabSecret signs the channel's callbacks in every experiment.
const LabSecret = "orders-e2e-callback-secret-0042"

// labSKU is the sale every experiment uses (the dev seed's SKU).
const labSKU = "sku-lab-01"

// Lab is the app plus its payment channel: the kit the chapter's
// experiments (and its e2e tests) drive an order with.
type Lab struct {
	*lab.App
	Pay *fakeprovider.Server
	x   *lab.X // the timeline the kit narrates into
}

// start runs a payment channel that settles only when the test says so
// (the payment network's answer is the experiment's to time) and the app
// pointed at it, with reconciliation looking at every PAYING order at
// once. settings override FENCELAB_FLASHSALE_* for this app.
func StartLab(x *lab.X, o lab.Options) *Lab {
	t := x
	t.Helper()
	srv, err := fakeprovider.Start(fakeprovider.Capabilities{
		Name: "pay", IdempotencyKeys: true, Query: true, Close: true, Refund: true,
		Async: true, ManualSettle: true, CallbackSecret: []byte(LabSecret),
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	s := map[string]string{
		order.EnvPayURL: srv.URL(), order.EnvCallbackSecret: LabSecret, order.EnvReconcileAfter: "0s",
	}
	for k, v := range o.Settings {
		s[k] = v
	}
	o.Settings = s
	a := x.Start(o)
	require.NoError(t, a.Seed(context.Background(), "flashsale"))
	srv.SetCallbackURL(a.URL + order.CallbackPath)
	return &Lab{App: a, Pay: srv, x: x}
}

func (l *Lab) User(t lab.T, sub string) string { return l.Token(t, sub, httpx.RoleUser) }
func (l *Lab) Admin(t lab.T) string            { return l.Token(t, "admin-0001", httpx.RoleAdmin) }

// AddSKU puts units of sku on sale through part A's inventory (a sale
// small enough to sell out in one line of a test).
func (l *Lab) AddSKU(t lab.T, sku string, units int) {
	t.Helper()
	_, err := reserve.NewInventory(reserve.InventoryOptions{}).CreateSKU(context.Background(), l.Pool, sku, units)
	require.NoError(t, err)
}

// Reserve holds a unit of sku for the token's user.
func (l *Lab) Reserve(t lab.T, tok, sku, key string) reserve.Reservation {
	t.Helper()
	r := l.Do(t, lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok,
		Body: reserve.ReserveRequest{SKU: sku, RequestKey: key}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var res reserve.Reservation
	r.JSON(t, &res)
	l.x.Step(lab.Step{Actor: "buyer", Action: "hold " + sku, Outcome: lab.Accepted, Note: fmt.Sprintf("reservation %d", res.ID)})
	return res
}

// Order creates the order of a reservation.
func (l *Lab) Order(t lab.T, tok string, reservationID int64) order.Order {
	t.Helper()
	r := l.Do(t, CreateReq(tok, reservationID, nil))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var o order.Order
	r.JSON(t, &o)
	require.Equal(t, order.StateCreated, o.State)
	l.x.Step(lab.Step{Actor: "buyer", Action: fmt.Sprintf("order reservation %d", reservationID), Outcome: lab.Accepted,
		Note: fmt.Sprintf("order %d CREATED", o.ID)})
	return o
}

// Ordered is a buyer's first two requests: sub holds a unit of sku under
// key and orders it. It returns sub's token, the hold and the CREATED
// order, the starting point of every timeline in this chapter.
func (l *Lab) Ordered(t lab.T, sub, sku, key string) (string, reserve.Reservation, order.Order) {
	t.Helper()
	tok := l.User(t, sub)
	res := l.Reserve(t, tok, sku, key)
	return tok, res, l.Order(t, tok, res.ID)
}

func CreateReq(tok string, reservationID int64, headers map[string]string) lab.Req {
	return lab.Req{Method: http.MethodPost, Path: "/flashsale/orders", Token: tok, Headers: headers,
		Body: order.CreateRequest{ReservationID: reservationID}}
}

func PayReq(tok string, id int64) lab.Req {
	return lab.Req{Method: http.MethodPost, Path: "/flashsale/orders/" + itoa(id) + "/pay", Token: tok}
}

// PayPending pays an order whose charge the channel accepts and leaves
// pending, and returns the charge (the ledger's row).
func (l *Lab) PayPending(t lab.T, tok string, id int64) fakeprovider.Effect {
	t.Helper()
	r := l.Do(t, PayReq(tok, id))
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	var o order.Order
	r.JSON(t, &o)
	require.Equal(t, order.StatePaying, o.State)
	e := l.Charge(t, o)
	require.Equal(t, fakeprovider.StatusPending, e.Status)
	require.Equal(t, e.ID, o.EffectID, "the pay answer names the charge")
	l.x.Step(lab.Step{Actor: "buyer", Action: fmt.Sprintf("pay order %d", id), Outcome: "PAYING", Note: "charge " + e.ID + " pending at the channel"})
	return e
}

// Charge is the order's one charge in the channel's ledger.
func (l *Lab) Charge(t lab.T, o order.Order) fakeprovider.Effect {
	t.Helper()
	effects := l.Pay.EffectsFor(o.PaymentRef)
	require.Len(t, effects, 1, "one charge per order, whatever was retried")
	require.Equal(t, o.ChargeKey(), effects[0].Key)
	require.Equal(t, order.Price, effects[0].Amount)
	return effects[0]
}

// View reads GET /flashsale/orders/{id}.
func (l *Lab) View(t lab.T, tok string, id int64) order.View {
	t.Helper()
	r := l.Do(t, lab.Req{Method: http.MethodGet, Path: "/flashsale/orders/" + itoa(id), Token: tok})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v order.View
	r.JSON(t, &v)
	return v
}

// Reconcile runs POST /flashsale/admin/reconcile once.
func (l *Lab) Reconcile(t lab.T) order.ReconcileResult {
	t.Helper()
	r := l.Do(t, lab.Req{Method: http.MethodPost, Path: "/flashsale/admin/reconcile", Token: l.Admin(t)})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var res order.ReconcileResult
	r.JSON(t, &res)
	l.x.Step(lab.Step{Actor: "reconciler", Action: "query the channel for PAYING orders", Outcome: fmt.Sprint(res.Outcomes)})
	return res
}

// Settle is the payment network answering: the channel settles the charge
// and its callback has been delivered (or given up) when settle returns.
func (l *Lab) Settle(t lab.T, effectID, status string) {
	t.Helper()
	require.NoError(t, l.Pay.Settle(effectID, status))
	l.Pay.WaitCallbacks()
	l.x.Step(lab.Step{Actor: "channel", Action: "settle charge " + effectID, Outcome: status, Note: "callback delivered"})
}

// ExpireHold forces a hold past its expiry (the boundary, by SQL) and runs
// the release, which returns its unit.
func (l *Lab) ExpireHold(t lab.T, reservationID int64) {
	t.Helper()
	_, err := l.Pool.Exec(context.Background(),
		`UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE id = $1`, reservationID)
	require.NoError(t, err)
	r := l.Do(t, lab.Req{Method: http.MethodPost, Path: "/flashsale/admin/release-expired", Token: l.Admin(t)})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.JSONEq(t, `{"released":1}`, string(r.Body))
	l.x.Step(lab.Step{Actor: "release", Action: fmt.Sprintf("hold %d expires; its unit goes back", reservationID), Outcome: lab.Accepted})
}

// RunRefundJobs claims and runs every due refund job once.
func (l *Lab) RunRefundJobs(t lab.T) []*claim.Job {
	t.Helper()
	ctx := context.Background()
	jobs, err := l.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{order.RefundKind}, Limit: 10})
	require.NoError(t, err)
	for _, j := range jobs {
		require.NoError(t, l.Jobs.Execute(ctx, j))
		l.x.Step(lab.Step{Actor: "worker", Action: fmt.Sprintf("refund job %d", j.ID), Outcome: lab.Accepted, Fence: j.Fence})
	}
	return jobs
}

// Callback posts a body to the callback route with a signature header.
func (l *Lab) Callback(t lab.T, body []byte, signature string) lab.Response {
	t.Helper()
	return l.callback(t, body, signature, false)
}

// ForgedCallback is Callback with a signature made to be refused: the
// request breaks the HTTP contract on purpose (a missing or malformed
// Fake-Signature), so only its answer is checked against the contract.
func (l *Lab) ForgedCallback(t lab.T, body []byte, signature string) lab.Response {
	t.Helper()
	return l.callback(t, body, signature, true)
}

func (l *Lab) callback(t lab.T, body []byte, signature string, forged bool) lab.Response {
	t.Helper()
	h := map[string]string{}
	if signature != "" {
		h[fakeprovider.SignatureHeader] = signature
	}
	r := l.Do(t, lab.Req{Method: http.MethodPost, Path: order.CallbackPath, Body: body, Headers: h, Invalid: forged})
	var cb fakeprovider.Callback
	_ = json.Unmarshal(body, &cb)
	outcome := lab.Accepted
	switch {
	case r.Status >= 300:
		outcome = lab.Refused
	case strings.Contains(string(r.Body), `"duplicate":true`):
		outcome = lab.Replayed
	}
	l.x.Step(lab.Step{Actor: "channel", Action: "callback " + cb.Type + " " + cb.ID, Outcome: outcome,
		Note: fmt.Sprintf("%d %s", r.Status, r.Code())})
	return r
}

// SignedCallback is a callback the channel could send, signed now.
func SignedCallback(t lab.T, id, typ string, e fakeprovider.Effect) ([]byte, string) {
	t.Helper()
	body, err := json.Marshal(fakeprovider.Callback{ID: id, Type: typ, Created: time.Now().UTC(), Effect: e})
	require.NoError(t, err)
	return body, fakeprovider.Sign([]byte(LabSecret), time.Now(), body)
}

// delivery is one callback as the channel sent it.
type Delivery struct {
	Body      []byte
	Signature string
}

// Capture points the channel's callbacks at a recorder instead of the app
// (answering 200, as the app would), so the experiment can deliver them
// itself: duplicated, shuffled, replayed. restore points them back.
func (l *Lab) Capture(t lab.T) (got func() []Delivery, restore func()) {
	t.Helper()
	var mu sync.Mutex
	var ds []Delivery
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		ds = append(ds, Delivery{Body: b, Signature: r.Header.Get(fakeprovider.SignatureHeader)})
		mu.Unlock()
	}))
	t.Cleanup(rec.Close)
	l.Pay.SetCallbackURL(rec.URL)
	return func() []Delivery {
			l.Pay.WaitCallbacks()
			mu.Lock()
			defer mu.Unlock()
			return append([]Delivery(nil), ds...)
		}, func() {
			l.Pay.SetCallbackURL(l.URL + order.CallbackPath)
		}
}

// SettleCaptured is the payment network settling the charge as succeeded
// while the channel's callbacks are captured (Capture): it returns what the
// channel sent, for the experiment to deliver itself.
func (l *Lab) SettleCaptured(t lab.T, effectID string) []Delivery {
	t.Helper()
	got, restore := l.Capture(t)
	defer restore()
	require.NoError(t, l.Pay.Settle(effectID, fakeprovider.StatusSucceeded))
	return got()
}

// AssertSettled is what every experiment ends with: the flash sale's
// invariants (FS-R* and ORD-*), and the money equation against the
// channel's ledger — for every order, what we recorded as charged and
// refunded is what the channel's ledger holds for its reference, each
// charge refunded at most once, and Σ(charged − refunded) = 1990 ×
// confirmed orders.
func (l *Lab) AssertSettled(t lab.T) {
	t.Helper()
	l.x.Env.Invariants().Assert(t, l.Pool, "flashsale")
	refunds := map[string]int{}
	for _, rf := range l.Pay.Refunds() {
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
		for _, e := range l.Pay.EffectsFor(o.ref) {
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

// Snapshot renders every row the experiments' "nothing changes" is about
// (the inbox's delivery counts aside) and the channel's ledger.
func (l *Lab) Snapshot(t lab.T) string {
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
		`SELECT id, kind, state FROM job_all WHERE kind LIKE 'flashsale.%' ORDER BY id`,
	} {
		rows, err := l.Pool.Query(context.Background(), q)
		require.NoError(t, err)
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		require.NoError(t, err)
		fmt.Fprintf(&sb, "%s\n%v\n", q, all)
	}
	fmt.Fprintf(&sb, "ledger %+v\nrefunds %+v\n", l.Pay.Effects(), l.Pay.Refunds())
	return sb.String()
}

// applied lists an order's applied moves as "FROM→TO".
func Applied(v order.View) []string {
	var out []string
	for _, tr := range v.Transitions {
		if tr.Applied {
			out = append(out, string(tr.From)+"→"+string(tr.To))
		}
	}
	return out
}

// units lists the inventory changes committed with an order's moves.
func Units(v order.View) []string {
	var out []string
	for _, tr := range v.Transitions {
		if tr.Unit != "" {
			out = append(out, tr.Unit)
		}
	}
	return out
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// PaidEvents counts the order_paid outbox events of an
func (l *Lab) PaidEvents(t lab.T, id int64) int {
	return l.Count(t, `SELECT count(*) FROM outbox_event WHERE topic = $1 AND key = $2`, order.TopicOrderPaid, itoa(id))
}

func (l *Lab) Reservation(t lab.T, id int64) reserve.Reservation {
	t.Helper()
	r, err := reserve.NewInventory(reserve.InventoryOptions{}).Get(context.Background(), l.Pool, id)
	require.NoError(t, err)
	return r
}

// slowCreates is a proxy in front of the channel that holds every charge
// request until land is called, then forwards it — after its caller has
// given up, as a slow network would. Everything else passes straight
// through.
type SlowCreates struct {
	srv    *httptest.Server
	target atomic.Value // string: the channel's URL
	gate   chan struct{}
	once   sync.Once
	seen   chan struct{} // closed when the first charge request arrived
	saw    sync.Once
	landed sync.WaitGroup
}

func NewSlowCreates(t lab.T) *SlowCreates {
	s := &SlowCreates{gate: make(chan struct{}), seen: make(chan struct{})}
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

func (s *SlowCreates) URL() string          { return s.srv.URL }
func (s *SlowCreates) To(channelURL string) { s.target.Store(channelURL) }

// land lets the held charges through (once one has arrived) and waits
// until they reached the channel.
func (s *SlowCreates) Land(t lab.T) {
	select {
	case <-s.seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("no charge request reached the proxy")
	}
	s.once.Do(func() { close(s.gate) })
	s.landed.Wait()
}
