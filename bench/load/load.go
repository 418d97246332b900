// Package load is the benches' load-generation harness, shared by `fencelab
// bench points|flashsale|feed|shortlink|upload`: a keep-alive HTTP client
// pool sized to the load, latency recording in an HDR histogram (bounded
// memory however long the run, three significant digits), a closed-loop
// driver, and the one RESULT line every bench ends with.
package load

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies records durations from any number of goroutines.
type Latencies struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// Bounds of a recorded latency: 1 µs to 10 minutes (longer values are
// recorded as the maximum), three significant digits.
const (
	minLatency = time.Microsecond
	maxLatency = 10 * time.Minute
)

// NewLatencies returns an empty recorder.
func NewLatencies() *Latencies {
	return &Latencies{h: hdrhistogram.New(int64(minLatency/time.Microsecond), int64(maxLatency/time.Microsecond), 3)}
}

// Record adds one duration.
func (l *Latencies) Record(d time.Duration) {
	us := max(int64(d/time.Microsecond), 1)
	us = min(us, int64(maxLatency/time.Microsecond))
	l.mu.Lock()
	_ = l.h.RecordValue(us) // in range by construction
	l.mu.Unlock()
}

// Merge adds every value of o.
func (l *Latencies) Merge(o *Latencies) {
	o.mu.Lock()
	snap := hdrhistogram.Import(o.h.Export())
	o.mu.Unlock()
	l.mu.Lock()
	l.h.Merge(snap)
	l.mu.Unlock()
}

// Count is how many durations were recorded.
func (l *Latencies) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// Quantile returns the q-quantile (q in 0..1; 1 is the maximum), 0 when
// nothing was recorded.
func (l *Latencies) Quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h.TotalCount() == 0 {
		return 0
	}
	if q >= 1 {
		return time.Duration(l.h.Max()) * time.Microsecond
	}
	return time.Duration(l.h.ValueAtQuantile(q*100)) * time.Microsecond
}

// Mean is the mean recorded duration.
func (l *Latencies) Mean() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.h.Mean() * float64(time.Microsecond))
}

// Of records ds in a new recorder (figures gathered elsewhere).
func Of(ds []time.Duration) *Latencies {
	l := NewLatencies()
	for _, d := range ds {
		l.Record(d)
	}
	return l
}

// Client is an HTTP client whose pool keeps up to conns keep-alive
// connections to one server (a closed loop of conns clients reuses them);
// close releases them.
func Client(conns int, timeout time.Duration) (c *http.Client, close func()) {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: 5 * time.Minute}
	return &http.Client{Transport: tr, Timeout: timeout}, tr.CloseIdleConnections
}

// ClosedLoop runs workers goroutines for d: each calls fn back to back
// until the time is up (fn's context ends then; a request in flight may
// finish on its own). It returns the elapsed time once all have stopped.
func ClosedLoop(ctx context.Context, workers int, d time.Duration, fn func(ctx context.Context, worker int)) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				fn(ctx, w)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// Every samples beside the load: it calls fn every d on a goroutine of its
// own until stop is called, and stop returns once fn's last call has
// returned, so what fn recorded is the caller's to read without a lock.
// fn's context ends with stop.
func Every(ctx context.Context, d time.Duration, fn func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// OpenLoop offers calls at rate per second for d, whatever the pace of
// the answers. Arrivals are a Poisson process, as pgbench --rate makes
// them: the gaps between due times are exponential with mean 1/rate,
// drawn from rng so that a seed repeats the schedule. Each call runs on a
// goroutine of its own and fn gets its due time, so that latency is
// measured from it: a slow answer holds back no later call, and a backlog
// shows in the latencies instead of lowering the offered rate (a closed
// loop hides it: coordinated omission). At most maxInFlight calls run at
// once; a call due beyond that is counted in missed, never queued without
// bound. fn's context ends with the time; the calls in flight then finish
// before OpenLoop returns.
func OpenLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, rng *rand.Rand,
	fn func(ctx context.Context, i int, due time.Time)) (elapsed time.Duration, missed int) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	slots := make(chan struct{}, maxInFlight)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var wg sync.WaitGroup
	start := time.Now()
	due := start
	for i := 0; ; i++ {
		due = due.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
			at := due // due moves on; the call keeps its own
			wg.Go(func() {
				defer func() { <-slots }()
				fn(ctx, i, at)
			})
		default:
			missed++
		}
	}
	wg.Wait()
	return time.Since(start), missed
}

// Result prints the bench's RESULT line: "RESULT <name> key=value …", the
// one line scripts read (bench/*.sh parse it by key). kv alternates keys
// and values; floats are printed with two decimals.
func Result(name string, kv ...any) {
	var sb strings.Builder
	sb.WriteString("RESULT " + name)
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		switch x := v.(type) {
		case float64:
			v = fmt.Sprintf("%.2f", x)
		case time.Duration:
			v = fmt.Sprintf("%.2f", Ms(x))
		}
		fmt.Fprintf(&sb, " %v=%v", kv[i], v)
	}
	fmt.Println(sb.String())
}

// Median is the middle value of v (of an even count, the mean of the two
// middle ones, as bench/cluster.sh's median), 0 when v is empty; v is left
// as it is.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
