// Package httpx is the HTTP edge every module shares: echo construction,
// request IDs, access logs, body limits, RFC 9457 problem errors, bearer
// token auth and HTTP metrics.
package httpx

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBodyLimit bounds every JSON request body unless a route opts out.
const DefaultBodyLimit = "1M"

// Options configure New.
type Options struct {
	Log *slog.Logger
	// Metrics receives the HTTP latency histogram (nil: not registered).
	Metrics prometheus.Registerer
	// BodyLimit for all routes (default DefaultBodyLimit).
	BodyLimit string
	// BodyLimitSkip exempts routes that enforce their own limit (uploads).
	BodyLimitSkip func(c echo.Context) bool
	// AccessLog writes one line per request at Info (4xx at Info, 5xx at Error).
	AccessLog bool
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
	e.Use(middleware.RequestID())
	if o.Metrics != nil {
		e.Use(metricsMiddleware(o.Metrics, o.Errors))
	}
	if o.AccessLog {
		e.Use(accessLog(o.Log))
	}
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: o.BodyLimit, Skipper: o.BodyLimitSkip}))
	return e
}

func accessLog(log *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogURI: true, LogStatus: true, LogLatency: true, LogRequestID: true,
		LogError: true, HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			lvl := slog.LevelInfo
			if v.Status >= 500 {
				lvl = slog.LevelError
			}
			log.LogAttrs(c.Request().Context(), lvl, "http",
				slog.String("method", v.Method), slog.String("uri", v.URI), slog.Int("status", v.Status),
				slog.Duration("latency", v.Latency), slog.String("request_id", v.RequestID))
			return nil
		},
	})
}

func metricsMiddleware(reg prometheus.Registerer, t *Errors) echo.MiddlewareFunc {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencelab_http_request_duration_seconds",
		Help:    "HTTP request latency by method, route template and status.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"method", "route", "status"})
	reg.MustRegister(hist)
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
			hist.WithLabelValues(c.Request().Method, route, strconv.Itoa(status)).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// JSON writes v with status; a shorthand that keeps handlers one line.
func JSON(c echo.Context, status int, v any) error { return c.JSON(status, v) }

// NoStore marks a response as uncacheable (tokens, balances).
func NoStore(c echo.Context) { c.Response().Header().Set("Cache-Control", "no-store") }
