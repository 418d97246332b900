package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/promx"
)

// App is the running deployable as an experiment sees it: its address, its
// database, and the process-wide parts an experiment may arm or read.
type App struct {
	URL     string // base URL of the HTTP server
	DBURL   string // the app's database
	DataDir string // the app's data directory (blobs)
	Pool    *pgxpool.Pool
	Faults  *faults.Set
	Jobs    *claim.Client
	Auth    *httpx.Auth
	Metrics *prometheus.Registry
	Client  *http.Client
	// Seed runs the demo seed of the named module (as `dev` does).
	Seed func(ctx context.Context, module string) error
	// Check, when set, inspects every exchange Do and Send make: the e2e
	// harness validates each against the OpenAPI contract. Its error fails
	// Do's t, or for Send the test in Reporter.
	Check    func(Exchange) error
	Reporter T
	invalid  bool // every request is Req.Invalid (BadInput)
}

// Exchange is one request as sent and the response read, for App.Check.
type Exchange struct {
	Req      Req
	Request  *http.Request
	Body     []byte // the request body as sent
	Response Response
}

// BadInput returns a view of the app whose every request is marked
// Req.Invalid: for bad-input experiments whose helpers build the requests.
func (a *App) BadInput() *App {
	b := *a
	b.invalid = true
	return &b
}

// Token mints a token for sub with role (valid one hour).
func (a *App) Token(t T, sub string, role httpx.Role) string {
	t.Helper()
	tok, err := a.Auth.Mint(sub, role, time.Hour)
	if err != nil {
		t.Fatalf("lab: mint token: %v", err)
	}
	return tok
}

// Response is a fully read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("lab: decode %d response: %v; body: %s", r.Status, err, r.Body)
	}
}

// Code returns the problem code of an error response ("" otherwise).
func (r Response) Code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

// Req describes a request.
type Req struct {
	Method  string
	Path    string
	Token   string
	Body    any // marshalled as JSON unless []byte or string
	Headers map[string]string
	// Invalid marks a request that breaks the HTTP contract on purpose (a
	// bad-input test): it is sent as it is and only its response is
	// checked. Every other request must be one the contract allows.
	Invalid bool
	// Fault marks a request whose experiment breaks the server on purpose
	// (a misconfigured store, an injected crash): a 500 is then an
	// accepted answer. No route documents a 500.
	Fault bool
}

// Do sends r and reads the whole response; a transport error fails t.
// Experiments that expect transport errors use Send.
func (a *App) Do(t T, r Req) Response {
	t.Helper()
	resp, err := a.send(context.Background(), r, t)
	if err != nil {
		t.Fatalf("lab: %s %s: %v", r.Method, r.Path, err)
	}
	return resp
}

// Send is Do without t: it returns transport errors (timeouts, dropped
// connections) to the caller.
func (a *App) Send(ctx context.Context, r Req) (Response, error) {
	return a.send(ctx, r, a.Reporter)
}

func (a *App) send(ctx context.Context, r Req, t T) (Response, error) {
	var raw []byte
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		raw = buf
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, a.URL+r.Path, body)
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if a.Check != nil && t != nil {
		r.Invalid = r.Invalid || a.invalid
		if err := a.Check(Exchange{Req: r, Request: req, Body: raw, Response: out}); err != nil {
			t.Errorf("contract: %s %s → %d: %v\nresponse body: %.2000s", r.Method, r.Path, out.Status, err, b)
		}
	}
	return out, nil
}

// Gauge reads a gauge (or counter) from the app's registry, the values
// /metrics serves; labels are name/value pairs the sample must carry (the
// samples' sum when several do). A metric with no such sample fails t.
func (a *App) Gauge(t T, name string, labels ...string) float64 {
	t.Helper()
	v, ok, err := promx.Value(a.Metrics, name, labels...)
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	if !ok {
		t.Fatalf("lab: no metric %s%v", name, labels)
	}
	return v
}

// Count runs a counting query on the app's database.
func (a *App) Count(t T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := a.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("lab: count: %v\n%s", err, sql)
	}
	return n
}

// JobHistory is a claim-engine job's events as "event:fence", oldest
// first: how the claim and notification chapters show a job's life (one
// claim per fence, CLAIM-I3; a completion only under the current fence,
// CLAIM-I4) and assert on it.
func JobHistory(t T, db pg.Querier, jobID int64) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT event || ':' || fence FROM job_event WHERE job_id = $1 ORDER BY id`, jobID)
	if err != nil {
		t.Fatalf("lab: job %d's events: %v", jobID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("lab: job %d's events: %v", jobID, err)
	}
	return out
}
