package console

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/outbox"
)

// sample is one point of the console's charts.
type sample struct {
	At         time.Time
	Ready      int64   // claim jobs ready
	Running    int64   // claim jobs running
	Waiting    int64   // unknown + needs_review
	LagEvents  int64   // the largest outbox consumer lag, in events
	LagSeconds float64 // and in age of its oldest event
	Finished   float64 // attempts finished by this process (counter)
}

// sampler is a bounded ring of samples kept in memory: the charts cover
// the last minutes of this process and cost nothing to draw; nothing is
// stored in the database.
type sampler struct {
	mu   sync.Mutex
	ring []sample
	next int
	full bool
}

func newSampler(n int) *sampler { return &sampler{ring: make([]sample, n)} }

func (s *sampler) add(x sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring[s.next] = x
	s.next = (s.next + 1) % len(s.ring)
	if s.next == 0 {
		s.full = true
	}
}

// all returns the samples oldest first.
func (s *sampler) all() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]sample(nil), s.ring[:s.next]...)
	}
	return append(append([]sample(nil), s.ring[s.next:]...), s.ring[:s.next]...)
}

// sample is the console's background task (run by serve and dev): it reads
// the queue (live rows only) and the outbox consumers every SampleEvery.
func (c *Console) sample(ctx context.Context) error {
	t := time.NewTicker(c.o.SampleEvery)
	defer t.Stop()
	for {
		c.takeSample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Console) takeSample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	x := sample{At: time.Now()}
	if c.d.Jobs != nil {
		if q, err := c.d.Jobs.Queue(ctx); err == nil {
			for _, d := range q.Depth {
				switch d.State {
				case claim.StateReady:
					x.Ready += d.Jobs
				case claim.StateRunning:
					x.Running += d.Jobs
				case claim.StateUnknown, claim.StateNeedsReview:
					x.Waiting += d.Jobs
				}
			}
		}
	}
	if ss, err := outbox.Statuses(ctx, c.d.Pool); err == nil {
		for _, s := range ss {
			x.LagEvents = max(x.LagEvents, s.LagEvents)
			x.LagSeconds = max(x.LagSeconds, s.LagSeconds)
		}
	}
	x.Finished = counterSum(c.d.Metrics, "fencelab_claim_outcomes_total")
	c.samples.add(x)
}

// counterSum adds up every series of a counter in reg.
func counterSum(reg *prometheus.Registry, name string) float64 {
	if reg == nil {
		return 0
	}
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
