// Package httpx is the HTTP edge every module shares: echo construction,
// request IDs, access logs, body limits and deadlines, admission for write
// routes, RFC 9457 problem errors, bearer token auth and HTTP metrics.
package httpx

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

// DefaultBodyLimit bounds every JSON request body unless a route opts out.
const DefaultBodyLimit = "1M"

// Body deadlines: how long a request body may take to arrive, from the
// moment its handler chain starts. A client that trickles its body (one
// byte every ten seconds) is cut off with 408 and its connection closed.
const (
	DefaultBodyTimeout      = 10 * time.Second
	DefaultLargeBodyTimeout = 2 * time.Minute // routes with their own body limit (upload chunks)
)

// Options configure New.
type Options struct {
	Log *slog.Logger
	// Metrics receives the HTTP latency histogram (nil: not registered).
	Metrics prometheus.Registerer
	// BodyLimit for all routes (default DefaultBodyLimit).
	BodyLimit string
	// BodyLimitSkip exempts routes that enforce their own limit (uploads);
	// they get LargeBodyTimeout instead of BodyTimeout.
	BodyLimitSkip func(c echo.Context) bool
	// BodyTimeout bounds the time a request body may take (default
	// DefaultBodyTimeout); LargeBodyTimeout the same on BodyLimitSkip routes.
	BodyTimeout, LargeBodyTimeout time.Duration
	// AccessLog writes one line per request at Info (4xx at Info, 5xx at Error).
	AccessLog bool
	// Admission, when set, bounds the write requests (POST, PUT, PATCH,
	// DELETE) running at once in this process, with a bounded line behind
	// them; the rest get 503 overloaded with Retry-After.
	Admission *Limiter
	// Errors answers the modules' sentinel errors (nil: database sentinels only).
	Errors *Errors
}

// New builds the echo instance shared by `serve` and the e2e tests.
func New(o Options) *echo.Echo {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.BodyLimit == "" {
		o.BodyLimit = DefaultBodyLimit
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.LargeBodyTimeout <= 0 {
		o.LargeBodyTimeout = DefaultLargeBodyTimeout
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	if o.Errors == nil {
		o.Errors = base
	}
	e.HTTPErrorHandler = ErrorHandler(o.Log, o.Errors)
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set(errorsKey, o.Errors); return next(c) }
	})
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			o.Log.Error("panic", "err", err, "path", c.Request().URL.Path, "stack", string(stack))
			return err
		},
	}))
	e.Use(requestID)
	if o.Metrics != nil {
		e.Use(metricsMiddleware(o.Metrics, o.Errors))
	}
	if o.AccessLog {
		e.Use(accessLog(o.Log))
	}
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if p := checkURL(c.Request().URL); p != nil {
				return p
			}
			return next(c)
		}
	})
	e.Use(bodyDeadline(o))
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: o.BodyLimit, Skipper: o.BodyLimitSkip}))
	if o.Admission != nil {
		e.Use(admission(o.Admission, o.BodyLimitSkip))
	}
	return e
}

// requestIDRE is what an inbound X-Request-Id must look like to be kept:
// a short token of safe characters (UUIDs, ULIDs, trace ids). Anything
// else (quotes, spaces, kilobytes) is replaced by a generated id, so what
// is echoed and logged is always safe.
var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// ValidRequestID reports whether a client's X-Request-Id is kept.
func ValidRequestID(s string) bool { return requestIDRE.MatchString(s) }

func requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ids := c.Request().Header.Values(echo.HeaderXRequestID)
		id := ""
		if len(ids) == 1 && ValidRequestID(ids[0]) {
			id = ids[0]
		} else {
			var b [16]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Request().Header.Set(echo.HeaderXRequestID, id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

// MethodLabel folds a request method into a bounded set: the methods of
// RFC 9110 and PATCH keep their name, anything else is "other". Metrics and
// logs use it so a client cannot mint label values (or log lines of any
// size) by inventing methods.
func MethodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// maxLoggedURI bounds the request URI in an access-log line.
const maxLoggedURI = 512

func accessLog(log *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogURI: true, LogStatus: true, LogLatency: true, LogRequestID: true,
		LogError: true, HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			lvl := slog.LevelInfo
			if v.Status >= 500 {
				lvl = slog.LevelError
			}
			uri := v.URI
			if len(uri) > maxLoggedURI {
				uri = uri[:maxLoggedURI] + "…"
			}
			log.LogAttrs(c.Request().Context(), lvl, "http",
				slog.String("method", MethodLabel(v.Method)), slog.String("uri", uri), slog.Int("status", v.Status),
				slog.Duration("latency", v.Latency), slog.String("request_id", v.RequestID))
			return nil
		},
	})
}

// metricsMiddleware observes every request. Every label is bounded: the
// method is folded by MethodLabel, the route is the template (or
// "unmatched"), the status is a three-digit code the server chose.
func metricsMiddleware(reg prometheus.Registerer, t *Errors) echo.MiddlewareFunc {
	hist := promx.HistogramVec(reg, "fencelab_http_request_duration_seconds",
		"HTTP request latency by method, route template and status.",
		[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}, "method", "route", "status")
	obs := &observers{vec: hist, m: map[observerKey]prometheus.Observer{}}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			status := c.Response().Status
			if err != nil {
				status = t.Problem(err).Status
			}
			route := c.Path() // the template, so cardinality stays bounded
			if route == "" {
				route = "unmatched"
			}
			obs.get(observerKey{MethodLabel(c.Request().Method), route, status}).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// observers holds each label set's histogram once resolved, so a request
// costs one map lookup instead of the vector's label hashing and a status
// string built per request. The label sets are bounded (see
// metricsMiddleware), and so is the map.
type observers struct {
	vec *prometheus.HistogramVec
	mu  sync.RWMutex
	m   map[observerKey]prometheus.Observer
}

type observerKey struct {
	method, route string
	status        int
}

func (o *observers) get(k observerKey) prometheus.Observer {
	o.mu.RLock()
	h, ok := o.m[k]
	o.mu.RUnlock()
	if ok {
		return h
	}
	h = o.vec.WithLabelValues(k.method, k.route, strconv.Itoa(k.status))
	o.mu.Lock()
	o.m[k] = h
	o.mu.Unlock()
	return h
}

// ErrBodyTimeout: the request body did not arrive within its deadline
// (408 body_timeout).
var ErrBodyTimeout = errors.New("httpx: request body did not arrive in time")

var errBodyTimeout = ErrBodyTimeout

// bodyDeadline sets a read deadline on the connection for the time the
// request body may take. Once the body has been read to its end the
// deadline is lifted again (net/http's background read must not cancel a
// handler that simply runs long). A request without a body gets none.
func bodyDeadline(o Options) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if !hasBody(req) {
				return next(c)
			}
			d := o.BodyTimeout
			if o.BodyLimitSkip != nil && o.BodyLimitSkip(c) {
				d = o.LargeBodyTimeout
			}
			rc := http.NewResponseController(c.Response())
			if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
				return next(c) // a writer without deadlines (httptest.ResponseRecorder)
			}
			req.Body = &deadlineBody{ReadCloser: req.Body, rc: rc}
			return next(c)
		}
	}
}

// hasBody reports whether req comes with a body to read.
func hasBody(req *http.Request) bool {
	return req.Body != nil && req.Body != http.NoBody && (req.ContentLength != 0 || len(req.TransferEncoding) > 0)
}

type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var ne net.Error
	switch {
	case err == io.EOF && !b.done:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	}
	return n, err
}

// admission admits write requests through l (FS-R4 generalised): reads
// are never queued behind writes.
//
// A write's body is read in full before it asks for a slot (under the body
// limit and the body deadline; routes with their own limit, upload chunks,
// stream theirs). A slot is for work on the database: a client trickling
// its body would otherwise hold one for the whole body deadline, and a few
// of them would leave every other writer 503 overloaded — the trickler
// included, though the fault is its own. It gets 408 body_timeout, and
// holds a connection, never a slot.
func admission(l *Limiter, large func(echo.Context) bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			switch c.Request().Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			default:
				return next(c)
			}
			if req := c.Request(); hasBody(req) && (large == nil || !large(c)) {
				b, err := ReadBody(req)
				if err != nil {
					return err
				}
				req.Body = io.NopCloser(bytes.NewReader(b))
			}
			release, err := l.Acquire(c.Request().Context())
			if err != nil {
				return err
			}
			defer release()
			return next(c)
		}
	}
}

// JSON writes v with status; a shorthand that keeps handlers one line.
func JSON(c echo.Context, status int, v any) error { return c.JSON(status, v) }

// NoStore marks a response as uncacheable (tokens, balances).
func NoStore(c echo.Context) { c.Response().Header().Set("Cache-Control", "no-store") }
