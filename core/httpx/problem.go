package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/pg"
)

// ProblemContentType is RFC 9457's media type.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem document with a stable machine code. It is
// also an error, so handlers simply return it.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// RetryAfter, in seconds, becomes a Retry-After header (503, 409 in flight).
	RetryAfter int `json:"-"`
	// Extra members (e.g. the balance that was insufficient).
	Extra map[string]any `json:"-"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail) }

// NewProblem builds a problem; detail is formatted with args.
func NewProblem(status int, code, detail string, args ...any) *Problem {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	return &Problem{Type: "urn:fencelab:problem:" + code, Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// Shorthands for the statuses the conventions name.
func BadRequest(code, detail string, args ...any) *Problem {
	return NewProblem(http.StatusBadRequest, code, detail, args...)
}
func Invalid(code, detail string, args ...any) *Problem {
	return NewProblem(http.StatusUnprocessableEntity, code, detail, args...)
}
func NotFound(code, detail string, args ...any) *Problem {
	return NewProblem(http.StatusNotFound, code, detail, args...)
}
func Conflict(code, detail string, args ...any) *Problem {
	return NewProblem(http.StatusConflict, code, detail, args...)
}
func Forbidden(detail string, args ...any) *Problem {
	return NewProblem(http.StatusForbidden, "forbidden", detail, args...)
}
func Unauthorized(detail string, args ...any) *Problem {
	return NewProblem(http.StatusUnauthorized, "unauthorized", detail, args...)
}

// Overloaded is the 503 a shedding limiter returns, with Retry-After.
func Overloaded(retryAfterSeconds int) *Problem {
	p := NewProblem(http.StatusServiceUnavailable, "overloaded", "the server is at its admission limit; retry later")
	p.RetryAfter = retryAfterSeconds
	return p
}

// With adds an extra member to the problem document.
func (p *Problem) With(key string, v any) *Problem {
	if p.Extra == nil {
		p.Extra = map[string]any{}
	}
	p.Extra[key] = v
	return p
}

// ErrorMapping is one sentinel → HTTP translation. A module lists its
// mappings next to its sentinels (errors.go) and in app.Module.Errors; the
// process builds one Errors table from every module's list.
type ErrorMapping struct {
	Err    error
	Status int
	Code   string
}

// Map is an ErrorMapping; it keeps the modules' tables one line per sentinel.
func Map(err error, status int, code string) ErrorMapping {
	return ErrorMapping{Err: err, Status: status, Code: code}
}

// ErrorTable is a package's error mappings, declared with the sentinels
// themselves: New makes a sentinel and records the answer it gets, so a
// package's client-facing errors and their HTTP answers are one literal,
// and a sentinel cannot be declared without its answer. A package declares
//
//	var Errors httpx.ErrorTable
//
// with no initializer (its sentinels' initializers fill it, in declaration
// order) and its module lists it in app.Module.Errors.
type ErrorTable []ErrorMapping

// New makes a sentinel error with text and records that it is answered
// with status and code.
func (t *ErrorTable) New(status int, code, text string) error {
	err := errors.New(text)
	*t = append(*t, Map(err, status, code))
	return err
}

// baseMappings answer the database sentinels every module may return; they
// are consulted after the modules' own, which are more specific.
var baseMappings = []ErrorMapping{
	Map(pg.ErrNotFound, http.StatusNotFound, "not_found"),
	Map(pg.ErrSerialization, http.StatusServiceUnavailable, "retry"),
	Map(pg.ErrDeadlock, http.StatusServiceUnavailable, "retry"),
	Map(pg.ErrUnavailable, http.StatusServiceUnavailable, "database_unavailable"),
	Map(ErrBodyTimeout, http.StatusRequestTimeout, "body_timeout"),
}

// Errors is an immutable error table: the modules' mappings in the order
// given, then the database sentinels. It is built once per process (or per
// test) and applied in one place, the error handler.
type Errors struct {
	list []ErrorMapping
}

// NewErrors builds a table from the modules' lists, consulted in order
// (the first mapping an error matches wins). A mapping without an error,
// status or code panics: it is a programming mistake in a static table.
func NewErrors(lists ...[]ErrorMapping) *Errors {
	t := &Errors{}
	for _, l := range lists {
		for _, m := range l {
			if m.Err == nil || m.Status < 400 || m.Code == "" {
				panic(fmt.Sprintf("httpx: incomplete error mapping %+v", m))
			}
			t.list = append(t.list, m)
		}
	}
	t.list = append(t.list, baseMappings...)
	return t
}

// Mappings returns the table in lookup order (for docs and checks).
func (t *Errors) Mappings() []ErrorMapping { return append([]ErrorMapping(nil), t.list...) }

// base answers errors when no table was given (a bare httpx.New).
var base = NewErrors()

// Problem converts any error into the problem the client sees. Unknown
// errors become a 500 whose detail does not leak internals.
func (t *Errors) Problem(err error) *Problem {
	if t == nil {
		t = base
	}
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return fromHTTPError(he)
	}
	err = pg.MapError(err) // raw driver errors are classified here too
	for _, m := range t.list {
		if errors.Is(err, m.Err) {
			detail := err.Error()
			if m.Status >= 500 { // server-side trouble: no internals in the answer
				detail = "temporarily unavailable; retry"
			}
			p := NewProblem(m.Status, m.Code, "%s", detail)
			if m.Status == http.StatusServiceUnavailable {
				p.RetryAfter = 1
			}
			return p
		}
	}
	return NewProblem(http.StatusInternalServerError, "internal", "internal error")
}

// errorsKey is where New's middleware puts the instance's table, so that
// code answering inside a request (core/idem storing a rejection, a handler
// adding members to a problem) uses the same table as the error handler.
const errorsKey = "fencelab.httpx.errors"

// ProblemOf converts err with the error table of c's echo instance.
func ProblemOf(c echo.Context, err error) *Problem {
	t, _ := c.Get(errorsKey).(*Errors)
	return t.Problem(err)
}

func fromHTTPError(he *echo.HTTPError) *Problem {
	code := map[int]string{
		http.StatusNotFound:              "not_found",
		http.StatusMethodNotAllowed:      "method_not_allowed",
		http.StatusRequestEntityTooLarge: "body_too_large",
		http.StatusUnsupportedMediaType:  "unsupported_media_type",
		http.StatusUnauthorized:          "unauthorized",
		http.StatusForbidden:             "forbidden",
		http.StatusBadRequest:            "bad_request",
		http.StatusTooManyRequests:       "too_many_requests",
		http.StatusServiceUnavailable:    "overloaded",
		http.StatusRequestTimeout:        "body_timeout",
	}[he.Code]
	if code == "" {
		code = "http_" + strconv.Itoa(he.Code)
	}
	detail := http.StatusText(he.Code)
	if s, ok := he.Message.(string); ok && s != "" {
		detail = s
	}
	if he.Code == http.StatusRequestEntityTooLarge {
		detail = "request body exceeds the limit for this route"
	}
	return NewProblem(he.Code, code, "%s", detail)
}

// ErrorHandler writes every error as problem+json, and logs server-side
// failures with the request ID (the client sees only "internal error").
func ErrorHandler(log *slog.Logger, t *Errors) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := t.Problem(err)
		if errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil {
			// The client went away; nobody reads the answer.
			p = NewProblem(499, "client_closed_request", "client closed the request")
		}
		if p.Status >= 500 && p.Status != http.StatusServiceUnavailable {
			log.Error("request failed", "err", err, "method", MethodLabel(c.Request().Method),
				"path", c.Request().URL.Path, "request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		}
		if p.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
		}
		if p.Status == http.StatusUnauthorized {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="fencelab"`)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(p.Status)
			return
		}
		_ = c.Blob(p.Status, ProblemContentType, ProblemDocument(c, p))
	}
}

// ProblemDocument renders p as the problem+json body this request would
// get, with its instance and request ID. core/idem stores these exact bytes
// so that a replayed business rejection is byte-identical.
func ProblemDocument(c echo.Context, p *Problem) []byte {
	body := map[string]any{
		"type": p.Type, "title": p.Title, "status": p.Status, "code": p.Code,
	}
	if p.Detail != "" {
		body["detail"] = p.Detail
	}
	body["instance"] = c.Request().URL.Path
	if id := c.Response().Header().Get(echo.HeaderXRequestID); id != "" {
		body["request_id"] = id
	}
	for k, v := range p.Extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	return b
}
