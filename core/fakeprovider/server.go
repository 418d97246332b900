// Package fakeprovider is one configurable stand-in for every external party
// the book's services call: the chapter-14 tool, the notification channels
// (email, sms, push) and the payment channel. It listens on loopback only,
// keeps an effect ledger and request counters that tests read as ground
// truth, and lets each test script the faults that make distributed work
// hard: delays, error statuses, an effect committed whose response is
// dropped, and duplicated, reordered or delayed callbacks.
//
// The protocol (JSON; errors are {"code": …, "detail": …}):
//
//	POST /v1/effects                      create an effect (Idempotency-Key header honoured when the
//	                                      party accepts keys): {"reference","amount","data"} → 201 effect
//	GET  /v1/effects?key=K | ?reference=R authoritative lookup → 200 {"effects":[…]} (empty: none exist)
//	POST /v1/effects/{id}/close           cancel a pending effect → 200 effect; 409 once it settled
//	POST /v1/effects/{id}/refunds         {"amount"} (Idempotency-Key honoured) → 201 refund
//
// A capability the party lacks answers 501 (the client returns
// ErrUnsupported). Signed callbacks are POSTed to CallbackURL with
// Fake-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>;
// receivers check them with Verify.
package fakeprovider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Capabilities describe one party.
type Capabilities struct {
	// Name prefixes effect ids ("email_1") and names the party in errors.
	Name string
	// IdempotencyKeys: a repeated Idempotency-Key returns the first effect
	// (same body, Idempotent-Replayed: true) instead of making a second;
	// the same key with a different body is refused with 422.
	IdempotencyKeys bool
	// Query: GET /v1/effects answers authoritatively by key or reference.
	Query bool
	// Close: pending effects can be cancelled.
	Close bool
	// Refund: settled effects can be refunded (partially, up to the amount).
	Refund bool
	// Async: effects start pending and settle (succeeded) after SettleAfter,
	// announced by a callback — a payment. Without it they succeed at once.
	Async       bool
	SettleAfter time.Duration
	// ManualSettle: async effects stay pending until the test calls Settle.
	ManualSettle bool
	// CallbackURL receives a signed callback for every status change
	// (SetCallbackURL changes it later); CallbackSecret signs them.
	CallbackURL    string
	CallbackSecret []byte
}

// Effect statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusClosed    = "closed"
	StatusRefunded  = "refunded" // fully refunded; partial refunds keep succeeded
)

// Effect is one row of the ledger: something the party did.
type Effect struct {
	ID        string          `json:"id"`
	Key       string          `json:"key,omitempty"`
	Reference string          `json:"reference,omitempty"`
	Amount    int64           `json:"amount"`
	Data      json.RawMessage `json:"data,omitempty"`
	Status    string          `json:"status"`
	Refunded  int64           `json:"refunded"`
	CreatedAt time.Time       `json:"created_at"`
}

// Refund is one refund of an effect.
type Refund struct {
	ID       string `json:"id"`
	EffectID string `json:"effect_id"`
	Key      string `json:"key,omitempty"`
	Amount   int64  `json:"amount"`
}

// Op names what a request asks for; faults and counters are per op.
type Op string

const (
	OpCreate Op = "create"
	OpQuery  Op = "query"
	OpClose  Op = "close"
	OpRefund Op = "refund"
)

// Fault is a scripted misbehaviour, applied to matching requests in the
// order they arrive.
type Fault struct {
	Op  Op     // "" matches every op
	Key string // only requests with this Idempotency-Key or reference ("" matches all)
	// Times is how many matching requests it applies to (0: all of them).
	Times int
	// Delay before the request is handled (the client may time out first:
	// the effect still happens).
	Delay time.Duration
	// Status answers with this error status and no effect (503, 429, 500 …).
	Status int
	// DropResponse performs the effect (or replays it, for a repeated
	// idempotency key), then closes the connection without answering: the
	// caller cannot know what happened.
	DropResponse bool
}

type fault struct {
	Fault
	used int
}

// Server is a running fake party.
type Server struct {
	caps Capabilities
	srv  *http.Server
	ln   net.Listener

	mu       sync.Mutex
	effects  []*Effect
	byKey    map[string]*stored
	refunds  []Refund
	refundBy map[string]*stored
	faults   []*fault
	requests map[Op]int
	posts    int
	cb       callbacks
	seq      int
	closed   bool
	timers   []*time.Timer
}

// stored is the first response to an idempotency key.
type stored struct {
	fingerprint [32]byte
	status      int
	body        []byte
}

// Start runs a party on 127.0.0.1 with an ephemeral port.
func Start(caps Capabilities) (*Server, error) { return StartOn("127.0.0.1:0", caps) }

// StartOn runs a party on addr (experiments that must keep every listener
// in a given port range, as e2e/cluster does).
func StartOn(addr string, caps Capabilities) (*Server, error) {
	if caps.Name == "" {
		caps.Name = "fake"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: listen: %w", err)
	}
	s := &Server{caps: caps, ln: ln, byKey: map[string]*stored{}, refundBy: map[string]*stored{}, requests: map[Op]int{}}
	s.cb.init(s)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/effects", s.create)
	mux.HandleFunc("GET /v1/effects", s.query)
	mux.HandleFunc("POST /v1/effects/{id}/close", s.close)
	mux.HandleFunc("POST /v1/effects/{id}/refunds", s.refund)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the party's base URL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Client returns a client for this party.
func (s *Server) Client() *Client { return NewClient(s.URL(), 5*time.Second) }

// Close stops the party and its pending callbacks.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, t := range s.timers {
		t.Stop()
	}
	s.mu.Unlock()
	// Close the listener ourselves: Shutdown closes only the listeners
	// Serve has registered, and Serve runs in its own goroutine — a fake
	// closed before that goroutine ran would keep accepting connections
	// into the kernel's backlog.
	_ = s.ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.cb.wait()
}

// Inject adds a fault.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{Fault: f})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// SetCallbackURL points callbacks at url.
func (s *Server) SetCallbackURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caps.CallbackURL = url
}

// Effects returns a copy of the ledger, oldest first.
func (s *Server) Effects() []Effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Effect, len(s.effects))
	for i, e := range s.effects {
		out[i] = *e
	}
	return out
}

// EffectsFor returns the effects made with idempotency key or reference k.
func (s *Server) EffectsFor(k string) []Effect {
	var out []Effect
	for _, e := range s.Effects() {
		if e.Key == k || e.Reference == k {
			out = append(out, e)
		}
	}
	return out
}

// Refunds returns a copy of the refunds, oldest first.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Refund(nil), s.refunds...)
}

// Requests counts the requests of op that arrived (faulted ones included).
func (s *Server) Requests(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

// Posts counts every POST that arrived.
func (s *Server) Posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}

// Settle moves a pending effect to status (succeeded or failed) and sends
// its callback: the payment network answering.
func (s *Server) Settle(id, status string) error {
	if status != StatusSucceeded && status != StatusFailed {
		return fmt.Errorf("fakeprovider: settle to %q: want succeeded or failed", status)
	}
	s.mu.Lock()
	e := s.find(id)
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("fakeprovider: no effect %q", id)
	}
	if e.Status != StatusPending {
		s.mu.Unlock()
		return fmt.Errorf("fakeprovider: effect %s is %s, not pending", id, e.Status)
	}
	e.Status = status
	snap := *e
	s.mu.Unlock()
	s.cb.emit("effect."+status, snap)
	return nil
}

func (s *Server) find(id string) *Effect {
	for _, e := range s.effects {
		if e.ID == id {
			return e
		}
	}
	return nil
}

// arrive counts a request and returns the fault that applies to it, if any.
func (s *Server) arrive(r *http.Request, op Op, key string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
	if r.Method == http.MethodPost {
		s.posts++
	}
	for _, f := range s.faults {
		if (f.Op != "" && f.Op != op) || (f.Key != "" && f.Key != key) || (f.Times > 0 && f.used >= f.Times) {
			continue
		}
		f.used++
		cp := f.Fault
		return &cp
	}
	return nil
}

// admit counts the request, applies its fault and refuses an operation
// the party lacks (can false: 501, cannot says why after its name). It
// returns the fault, whose DropResponse the handler applies after the
// effect, and whether the handler goes on.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, op Op, key string, can bool, cannot string) (*Fault, bool) {
	f := s.arrive(r, op, key)
	if before(w, r, f) {
		return f, false
	}
	if !can {
		writeErr(w, http.StatusNotImplemented, "unsupported", s.caps.Name+cannot)
		return f, false
	}
	return f, true
}

// before applies a fault's delay and error status; it reports whether the
// request was answered already.
func before(w http.ResponseWriter, r *http.Request, f *Fault) bool {
	if f == nil {
		return false
	}
	if f.Delay > 0 {
		// The party carries on even if the caller gives up meanwhile: the
		// effect may still happen, as with a real provider.
		time.Sleep(f.Delay)
	}
	if f.Status != 0 {
		writeErr(w, f.Status, "injected", "injected fault")
		return true
	}
	return false
}

// drop closes the connection without a response.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

type createBody struct {
	Reference string          `json:"reference"`
	Amount    int64           `json:"amount"`
	Data      json.RawMessage `json:"data,omitempty"`
}

const maxBody = 64 << 10

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeErr(w, http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds 64 KiB")
		return nil, false
	}
	return b, true
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	raw, ok := readBody(w, r)
	if !ok {
		return
	}
	var in createBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Amount < 0 || len(in.Reference) > 256 {
		writeErr(w, http.StatusBadRequest, "bad_request", "want {\"reference\": string ≤256, \"amount\": int ≥0, \"data\": any}")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 256 {
		writeErr(w, http.StatusBadRequest, "bad_request", "Idempotency-Key longer than 256 bytes")
		return
	}
	f := s.arrive(r, OpCreate, firstNonEmpty(key, in.Reference))
	if before(w, r, f) {
		return
	}
	fp := sha256.Sum256(raw)

	s.mu.Lock()
	if s.caps.IdempotencyKeys && key != "" {
		if st, ok := s.byKey[key]; ok {
			s.mu.Unlock()
			if f != nil && f.DropResponse {
				drop(w)
				return
			}
			replay(w, st, fp)
			return
		}
	}
	s.seq++
	e := &Effect{ID: fmt.Sprintf("%s_%d", s.caps.Name, s.seq), Key: key, Reference: in.Reference,
		Amount: in.Amount, Data: in.Data, Status: StatusSucceeded, CreatedAt: time.Now().UTC()}
	if s.caps.Async {
		e.Status = StatusPending
	}
	s.effects = append(s.effects, e)
	body, _ := json.Marshal(e)
	if s.caps.IdempotencyKeys && key != "" {
		s.byKey[key] = &stored{fingerprint: fp, status: http.StatusCreated, body: body}
	}
	snap := *e
	if s.caps.Async && !s.caps.ManualSettle {
		s.timers = append(s.timers, time.AfterFunc(s.caps.SettleAfter, func() { _ = s.Settle(snap.ID, StatusSucceeded) }))
	}
	s.mu.Unlock()

	if !s.caps.Async {
		s.cb.emit("effect.succeeded", snap)
	}
	if f != nil && f.DropResponse {
		drop(w)
		return
	}
	writeJSON(w, http.StatusCreated, body)
}

func replay(w http.ResponseWriter, st *stored, fp [32]byte) {
	if st.fingerprint != fp {
		writeErr(w, http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used with another request body")
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	writeJSON(w, st.status, st.body)
}

func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	key, ref := r.URL.Query().Get("key"), r.URL.Query().Get("reference")
	f, ok := s.admit(w, r, OpQuery, firstNonEmpty(key, ref), s.caps.Query, " cannot be queried")
	if !ok {
		return
	}
	if (key == "") == (ref == "") {
		writeErr(w, http.StatusBadRequest, "bad_request", "give exactly one of key or reference")
		return
	}
	s.mu.Lock()
	out := []Effect{}
	for _, e := range s.effects {
		if (key != "" && e.Key == key) || (ref != "" && e.Reference == ref) {
			out = append(out, *e)
		}
	}
	s.mu.Unlock()
	if f != nil && f.DropResponse {
		drop(w)
		return
	}
	body, _ := json.Marshal(map[string]any{"effects": out})
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) close(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f, ok := s.admit(w, r, OpClose, id, s.caps.Close, " cannot close effects")
	if !ok {
		return
	}
	s.mu.Lock()
	e := s.find(id)
	switch {
	case e == nil:
		s.mu.Unlock()
		writeErr(w, http.StatusNotFound, "not_found", "no such effect")
		return
	case e.Status != StatusPending && e.Status != StatusClosed:
		st := e.Status
		s.mu.Unlock()
		writeErr(w, http.StatusConflict, "not_closable", "effect is "+st)
		return
	}
	changed := e.Status == StatusPending
	e.Status = StatusClosed
	snap := *e
	s.mu.Unlock()
	if changed {
		s.cb.emit("effect.closed", snap)
	}
	if f != nil && f.DropResponse {
		drop(w)
		return
	}
	body, _ := json.Marshal(snap)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) refund(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	raw, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Amount int64 `json:"amount"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || in.Amount <= 0 {
		writeErr(w, http.StatusBadRequest, "bad_request", "want {\"amount\": int > 0}")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	f, ok := s.admit(w, r, OpRefund, firstNonEmpty(key, id), s.caps.Refund, " cannot refund")
	if !ok {
		return
	}
	fp := sha256.Sum256(append([]byte(id+"\x00"), raw...))
	s.mu.Lock()
	if s.caps.IdempotencyKeys && key != "" {
		if st, ok := s.refundBy[key]; ok {
			s.mu.Unlock()
			replay(w, st, fp)
			return
		}
	}
	e := s.find(id)
	switch {
	case e == nil:
		s.mu.Unlock()
		writeErr(w, http.StatusNotFound, "not_found", "no such effect")
		return
	case e.Status != StatusSucceeded:
		st := e.Status
		s.mu.Unlock()
		writeErr(w, http.StatusConflict, "not_refundable", "effect is "+st)
		return
	case e.Refunded+in.Amount > e.Amount:
		s.mu.Unlock()
		writeErr(w, http.StatusConflict, "refund_exceeds_amount", "refunds would exceed the effect's amount")
		return
	}
	s.seq++
	rf := Refund{ID: fmt.Sprintf("%s_re_%d", s.caps.Name, s.seq), EffectID: id, Key: key, Amount: in.Amount}
	s.refunds = append(s.refunds, rf)
	e.Refunded += in.Amount
	if e.Refunded == e.Amount {
		e.Status = StatusRefunded
	}
	snap := *e
	body, _ := json.Marshal(rf)
	if s.caps.IdempotencyKeys && key != "" {
		s.refundBy[key] = &stored{fingerprint: fp, status: http.StatusCreated, body: body}
	}
	s.mu.Unlock()
	s.cb.emit("effect.refunded", snap)
	if f != nil && f.DropResponse {
		drop(w)
		return
	}
	writeJSON(w, http.StatusCreated, body)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeErr(w http.ResponseWriter, status int, code, detail string) {
	b, _ := json.Marshal(map[string]string{"code": code, "detail": detail})
	writeJSON(w, status, b)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) callbackTarget() (string, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caps.CallbackURL, s.caps.CallbackSecret
}
