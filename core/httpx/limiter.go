package httpx

import (
	"context"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/promx"
)

// Limiter is per-process admission control (flash-sale FS-R4): at most
// Limit operations run at once, at most WaitLine wait behind them, and
// anyone beyond that is refused at once with 503 + Retry-After instead of
// queueing without bound. A waiter whose client goes away leaves the line
// without taking (or leaking) a permit.
type Limiter struct {
	name     string
	permits  chan struct{}
	maxWait  time.Duration
	waitLine int

	mu      sync.Mutex
	waiting int
	peak    int // highest in-use count seen (read by experiments)

	inUse    prometheus.Gauge
	queued   prometheus.Gauge
	rejected prometheus.Counter
}

// LimiterOptions configure NewLimiter.
type LimiterOptions struct {
	Name     string // metric label, e.g. "flashsale_reserve"
	Limit    int    // concurrent operations admitted (≥ 1)
	WaitLine int    // bounded wait line (≥ 0)
	// MaxWait bounds the time in line (0: until the client gives up).
	MaxWait time.Duration
	Metrics prometheus.Registerer
}

// NewLimiter returns a limiter; its gauges are registered when Metrics is set.
func NewLimiter(o LimiterOptions) *Limiter {
	if o.Limit < 1 {
		o.Limit = 1
	}
	if o.WaitLine < 0 {
		o.WaitLine = 0
	}
	l := &Limiter{
		name: o.Name, permits: make(chan struct{}, o.Limit), maxWait: o.MaxWait, waitLine: o.WaitLine,
		inUse: promx.Register(o.Metrics, prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencelab_admission_in_use",
			Help: "Operations currently admitted past the limiter.", ConstLabels: prometheus.Labels{"limiter": o.Name}})),
		queued: promx.Register(o.Metrics, prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencelab_admission_waiting",
			Help: "Requests waiting in the bounded line.", ConstLabels: prometheus.Labels{"limiter": o.Name}})),
		rejected: promx.Register(o.Metrics, prometheus.NewCounter(prometheus.CounterOpts{Name: "fencelab_admission_rejected_total",
			Help: "Requests refused with 503 because the line was full.", ConstLabels: prometheus.Labels{"limiter": o.Name}})),
	}
	return l
}

// Acquire admits the caller or refuses it. On success the caller must call
// release exactly once (it is idempotent). Errors: an Overloaded problem
// when the line is full or MaxWait passed, ctx.Err() when the client left.
func (l *Limiter) Acquire(ctx context.Context) (release func(), err error) {
	select { // fast path: a free permit, no queueing
	case l.permits <- struct{}{}:
		return l.admitted(), nil
	default:
	}
	l.mu.Lock()
	if l.waiting >= l.waitLine {
		l.mu.Unlock()
		l.rejected.Inc()
		return nil, Overloaded(1)
	}
	l.waiting++
	l.queued.Set(float64(l.waiting))
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiting--
		l.queued.Set(float64(l.waiting))
		l.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if l.maxWait > 0 {
		t := time.NewTimer(l.maxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case l.permits <- struct{}{}:
		return l.admitted(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timeout:
		l.rejected.Inc()
		return nil, Overloaded(1)
	}
}

func (l *Limiter) admitted() func() {
	l.mu.Lock()
	if n := len(l.permits); n > l.peak {
		l.peak = n
	}
	l.mu.Unlock()
	l.inUse.Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.inUse.Dec()
			<-l.permits
		})
	}
}

// Shed refuses at once, with the same 503 Acquire would give, when
// Acquire could only refuse now: every permit taken and the line full.
// A route calls it before costly work (verifying a token, reading a body)
// so that load it cannot take costs as little as possible; it is an early
// answer, not the bound — Acquire still decides for whatever gets past.
// It returns nil when there is room.
func (l *Limiter) Shed() error {
	if len(l.permits) < cap(l.permits) {
		return nil
	}
	l.mu.Lock()
	full := l.waiting >= l.waitLine
	l.mu.Unlock()
	if !full {
		return nil
	}
	l.rejected.Inc()
	return Overloaded(1)
}

// InUse is the number of admitted operations now.
func (l *Limiter) InUse() int { return len(l.permits) }

// Waiting is the current length of the wait line.
func (l *Limiter) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// Peak is the highest number of operations admitted at once so far.
func (l *Limiter) Peak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak
}

// Middleware wraps a route: admitted requests run, the rest get 503.
func (l *Limiter) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			release, err := l.Acquire(c.Request().Context())
			if err != nil {
				return err
			}
			defer release()
			return next(c)
		}
	}
}
