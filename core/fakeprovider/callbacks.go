package fakeprovider

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Callback is the body of a signed asynchronous notification.
type Callback struct {
	ID      string    `json:"id"`   // unique per event; duplicates repeat it
	Type    string    `json:"type"` // effect.succeeded | effect.failed | effect.closed | effect.refunded
	Created time.Time `json:"created"`
	Effect  Effect    `json:"effect"`
}

// Delivery records one callback attempt.
type Delivery struct {
	EventID string
	Type    string
	Status  int // 0: transport error
	At      time.Time
}

// SignatureHeader carries t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>.
const SignatureHeader = "Fake-Signature"

var (
	ErrBadSignature   = errors.New("fakeprovider: callback signature does not verify")
	ErrStaleSignature = errors.New("fakeprovider: callback timestamp outside the replay window")
)

// Sign returns the SignatureHeader value for body at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a callback's signature header against body: the HMAC must
// match (constant time) and the timestamp must lie within window of now, so
// a captured callback cannot be replayed later. Receivers still dedupe by
// Callback.ID: within the window, duplicates are legitimate.
func Verify(secret []byte, header string, body []byte, now time.Time, window time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return ErrBadSignature
	}
	if !hmac.Equal([]byte(sig), []byte(mac(secret, ts, body))) {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return ErrStaleSignature
	}
	return nil
}

// callbacks delivers signed callbacks, with scripted faults.
type callbacks struct {
	s      *Server
	http   *http.Client
	wg     sync.WaitGroup
	mu     sync.Mutex
	seq    int
	hold   bool
	held   [][]byte
	dups   int
	delay  time.Duration
	record []Delivery
}

func (c *callbacks) init(s *Server) {
	c.s = s
	c.http = &http.Client{Timeout: 5 * time.Second}
}

func (c *callbacks) emit(typ string, e Effect) {
	if url, _ := c.s.callbackTarget(); url == "" {
		return
	}
	c.mu.Lock()
	c.seq++
	body, _ := json.Marshal(Callback{ID: fmt.Sprintf("evt_%s_%d", c.s.caps.Name, c.seq), Type: typ, Created: time.Now().UTC(), Effect: e})
	if c.hold {
		c.held = append(c.held, body)
		c.mu.Unlock()
		return
	}
	dups, delay := c.dups, c.delay
	c.mu.Unlock()
	c.wg.Go(func() {
		if delay > 0 {
			time.Sleep(delay)
		}
		for range dups + 1 {
			c.deliver(body)
		}
	})
}

// deliver POSTs one callback, retrying a few times like a real provider
// when the receiver does not answer 2xx.
func (c *callbacks) deliver(body []byte) {
	var cb Callback
	_ = json.Unmarshal(body, &cb)
	for attempt := range 5 {
		if c.s.isClosed() {
			return
		}
		url, secret := c.s.callbackTarget()
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(SignatureHeader, Sign(secret, time.Now(), body))
		status := 0
		if resp, err := c.http.Do(req); err == nil {
			status = resp.StatusCode
			_ = resp.Body.Close()
		}
		c.mu.Lock()
		c.record = append(c.record, Delivery{EventID: cb.ID, Type: cb.Type, Status: status, At: time.Now()})
		c.mu.Unlock()
		if status >= 200 && status < 300 {
			return
		}
		time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
	}
}

func (c *callbacks) wait() { c.wg.Wait() }

// HoldCallbacks queues callbacks instead of sending them, until
// ReleaseCallbacks.
func (s *Server) HoldCallbacks() {
	s.cb.mu.Lock()
	defer s.cb.mu.Unlock()
	s.cb.hold = true
}

// ReleaseCallbacks sends the held callbacks one after another, in the order
// they were emitted or reversed (a reorder), and stops holding. It returns
// how many it released.
func (s *Server) ReleaseCallbacks(reverse bool) int {
	s.cb.mu.Lock()
	held := s.cb.held
	s.cb.held, s.cb.hold = nil, false
	dups := s.cb.dups
	s.cb.mu.Unlock()
	if reverse {
		slices.Reverse(held)
	}
	s.cb.wg.Go(func() {
		for _, b := range held {
			for range dups + 1 {
				s.cb.deliver(b)
			}
		}
	})
	return len(held)
}

// DuplicateCallbacks delivers every later callback n extra times.
func (s *Server) DuplicateCallbacks(n int) {
	s.cb.mu.Lock()
	defer s.cb.mu.Unlock()
	s.cb.dups = max(n, 0)
}

// DelayCallbacks delays every later callback by d.
func (s *Server) DelayCallbacks(d time.Duration) {
	s.cb.mu.Lock()
	defer s.cb.mu.Unlock()
	s.cb.delay = d
}

// WaitCallbacks blocks until every callback sent so far is delivered or
// given up.
func (s *Server) WaitCallbacks() { s.cb.wait() }

// Deliveries returns every callback attempt so far.
func (s *Server) Deliveries() []Delivery {
	s.cb.mu.Lock()
	defer s.cb.mu.Unlock()
	return append([]Delivery(nil), s.cb.record...)
}
