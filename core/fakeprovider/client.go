package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

var (
	// ErrUnknownOutcome: the request may have been carried out, but no
	// answer arrived (timeout, dropped connection). The caller must find out
	// (Find by key or reference) before acting again — or reuse the same
	// idempotency key. A claim handler returns claim.Unknown(err).
	ErrUnknownOutcome = errors.New("fakeprovider: outcome unknown: no response")
	// ErrUnsupported: the party lacks this capability (501).
	ErrUnsupported = errors.New("fakeprovider: not supported by this party")
	// ErrNotFound: no such effect (close, refund).
	ErrNotFound = errors.New("fakeprovider: no such effect")
)

// StatusError is an error answer from the party.
type StatusError struct {
	Status int
	Code   string
	Detail string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("fakeprovider: %d %s: %s", e.Status, e.Code, e.Detail)
}

// Retryable reports whether the same request may simply be sent again (the
// party said it did nothing: overload or a server error).
func (e *StatusError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// Client talks to a party. Every method is one HTTP request; none retries:
// retry policy belongs to the caller (the claim engine's backoff).
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client for the party at baseURL; timeout bounds each
// request (0: 10s).
func NewClient(baseURL string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Client{base: baseURL, http: &http.Client{Timeout: timeout}}
}

// CreateRequest asks for one effect: a tool call, a message, a charge.
type CreateRequest struct {
	// Key is sent as Idempotency-Key. Derive it from the business operation
	// (never from the attempt) so every retry and every new owner of the job
	// asks for the same effect.
	Key string
	// Reference is the caller's own id for the effect (merchant reference,
	// message id); Find looks it up.
	Reference string
	Amount    int64
	Data      any
}

// Create asks the party for an effect.
func (c *Client) Create(ctx context.Context, r CreateRequest) (Effect, error) {
	body, err := json.Marshal(createBody{Reference: r.Reference, Amount: r.Amount, Data: mustRaw(r.Data)})
	if err != nil {
		return Effect{}, err
	}
	var e Effect
	err = c.do(ctx, http.MethodPost, "/v1/effects", r.Key, body, &e)
	return e, err
}

// Lookup names what Find looks for: exactly one of Key or Reference.
type Lookup struct {
	Key       string
	Reference string
}

// Find is the party's authoritative query: every effect made with the key
// or reference. An empty result with a nil error means the party
// authoritatively has none. ErrUnsupported when it cannot be queried.
func (c *Client) Find(ctx context.Context, l Lookup) ([]Effect, error) {
	q := url.Values{}
	if l.Key != "" {
		q.Set("key", l.Key)
	}
	if l.Reference != "" {
		q.Set("reference", l.Reference)
	}
	var out struct {
		Effects []Effect `json:"effects"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/effects?"+q.Encode(), "", nil, &out)
	return out.Effects, err
}

// Close cancels a pending effect (an unpaid charge).
func (c *Client) Close(ctx context.Context, id string) (Effect, error) {
	var e Effect
	err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(id)+"/close", "", []byte("{}"), &e)
	return e, err
}

// Refund refunds amount of a settled effect; key makes the refund itself
// idempotent.
func (c *Client) Refund(ctx context.Context, id string, amount int64, key string) (Refund, error) {
	body, _ := json.Marshal(map[string]int64{"amount": amount})
	var rf Refund
	err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(id)+"/refunds", key, body, &rf)
	return rf, err
}

func mustRaw(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	if r, ok := v.(json.RawMessage); ok {
		return r
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	return b
}

func (c *Client) do(ctx context.Context, method, path, key string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// One method, one request: net/http resends a request it deems
		// replayable (a body it can rewind, and an Idempotency-Key header
		// counts as idempotent) when a reused connection breaks before the
		// answer — which hides exactly the "no answer" the caller must see
		// and record, and makes a call nobody logged. Without GetBody it
		// cannot. (A bodiless GET stays replayable: a repeated lookup has no
		// effect.)
		req.GetBody = nil
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if notSent(err) {
			return fmt.Errorf("fakeprovider: %s %s not sent: %w", method, path, err)
		}
		return fmt.Errorf("%w: %s %s: %v", ErrUnknownOutcome, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: %s %s: reading the answer: %v", ErrUnknownOutcome, method, path, err)
	}
	if resp.StatusCode >= 300 {
		var p struct{ Code, Detail string }
		_ = json.Unmarshal(b, &p)
		switch resp.StatusCode {
		case http.StatusNotImplemented:
			return fmt.Errorf("%w: %s", ErrUnsupported, p.Detail)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, p.Detail)
		}
		return &StatusError{Status: resp.StatusCode, Code: p.Code, Detail: p.Detail}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("fakeprovider: decoding %s %s: %w", method, path, err)
		}
	}
	return nil
}

// notSent reports a failure to connect: the request never left, so nothing
// can have happened and a plain retry is safe.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
