package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

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

// mapping is one sentinel → HTTP translation.
type mapping struct {
	err    error
	status int
	code   string
}

var (
	mapMu    sync.RWMutex
	mappings = []mapping{
		{pg.ErrNotFound, http.StatusNotFound, "not_found"},
		{pg.ErrSerialization, http.StatusServiceUnavailable, "retry"},
		{pg.ErrDeadlock, http.StatusServiceUnavailable, "retry"},
		{pg.ErrUnavailable, http.StatusServiceUnavailable, "database_unavailable"},
		{ErrBodyTimeout, http.StatusRequestTimeout, "body_timeout"},
	}
)

// MapError declares how a module's sentinel error is answered over HTTP.
// Modules call it from their errors.go, next to the sentinels, so the
// translation lives in one table per module and is applied in one place
// (the error handler).
func MapError(err error, status int, code string) {
	mapMu.Lock()
	defer mapMu.Unlock()
	// Newer, more specific mappings are consulted first.
	mappings = append([]mapping{{err, status, code}}, mappings...)
}

// ToProblem converts any error into the problem the client sees. Unknown
// errors become a 500 whose detail does not leak internals.
func ToProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return fromHTTPError(he)
	}
	err = pg.MapError(err) // raw driver errors are classified here too
	mapMu.RLock()
	defer mapMu.RUnlock()
	for _, m := range mappings {
		if errors.Is(err, m.err) {
			detail := err.Error()
			if m.status >= 500 { // server-side trouble: no internals in the answer
				detail = "temporarily unavailable; retry"
			}
			p := NewProblem(m.status, m.code, "%s", detail)
			if m.status == http.StatusServiceUnavailable {
				p.RetryAfter = 1
			}
			return p
		}
	}
	return NewProblem(http.StatusInternalServerError, "internal", "internal error")
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
func ErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := ToProblem(err)
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
