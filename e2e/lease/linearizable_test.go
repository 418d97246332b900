package lease_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lease"
	"github.com/fencelab/fencelab/e2e/e2etest"
	leaselab "github.com/fencelab/fencelab/lab/lease"
	"github.com/fencelab/fencelab/services/report"
)

// The history check. Many holders race for one lease and write one report
// with random stalls, some longer than the TTL; every acquire, write
// attempt and read is recorded with its call and return times, and
// porcupine searches for a sequential order consistent with real time in
// which this model explains every outcome:
//
//   - an acquire that succeeds issues a fence larger than every fence
//     issued before it (LOCK-I1); one refused with ErrHeld changes nothing;
//   - a write is accepted iff its fence is at least the highest fence the
//     resource has accepted (and was issued before the write); a refused
//     write changes nothing;
//   - a read returns the fence of the last accepted write.
//
// The "broken guard" sub-test runs the same workload against a resource
// that accepts every write, and requires porcupine to reject the history:
// a checker that cannot fail proves nothing.
func TestFenceHistoryIsLinearizable(t *testing.T) {
	t.Parallel()
	t.Run("fenced resource", func(t *testing.T) {
		a := e2etest.StartParallel(t, e2etest.Options{MaxConns: 20})
		h := runHolders(t, a, nil)
		require.Positive(t, h.refused, "some writes must have been stale, or the check proves little")
		res, info := porcupine.CheckOperationsVerbose(fenceModel, h.ops, time.Minute)
		if res != porcupine.Ok {
			dumpVisualization(t, info)
		}
		require.Equal(t, porcupine.Ok, res, "the history of %d operations must be linearizable", len(h.ops))
		e2etest.Assert(t, a.Pool, "lease", "report")
	})
	t.Run("broken guard", func(t *testing.T) {
		a := e2etest.StartParallel(t, e2etest.Options{MaxConns: 20})
		h := runHolders(t, a, leaselab.UnfencedOutput(a.Pool))
		require.Zero(t, h.refused, "the broken guard refuses nothing")
		res := porcupine.CheckOperationsTimeout(fenceModel, h.ops, time.Minute)
		require.Equal(t, porcupine.Illegal, res, "porcupine must reject a history where stale writes landed")
		res2 := e2etest.Invariants().Run(ctx, a.Pool, "LOCK-I2")
		require.False(t, res2[0].Holds(), "and so must LOCK-I2")
	})
}

// Operation inputs and outputs of the model.
type (
	acquireIn  struct{}
	acquireOut struct {
		granted bool
		fence   int64
	}
	writeIn  struct{ fence int64 }
	writeOut struct{ accepted bool }
	readIn   struct{}
	readOut  struct{ fence int64 } // 0: nothing written yet
)

// fenceState is the model's whole state: the highest fence issued and the
// highest fence the resource has accepted.
type fenceState struct{ issued, written int64 }

var fenceModel = porcupine.Model{
	Init: func() any { return fenceState{} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(fenceState)
		switch in := input.(type) {
		case acquireIn:
			out := output.(acquireOut)
			if !out.granted {
				return true, s
			}
			return out.fence > s.issued, fenceState{issued: out.fence, written: s.written}
		case writeIn:
			if output.(writeOut).accepted {
				return in.fence >= s.written && in.fence <= s.issued, fenceState{issued: s.issued, written: in.fence}
			}
			return in.fence < s.written, s
		case readIn:
			return output.(readOut).fence == s.written, s
		}
		return false, s
	},
	Hash: func(state any) uint64 {
		s := state.(fenceState)
		return uint64(s.issued)<<32 ^ uint64(s.written)
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case acquireIn:
			if out := output.(acquireOut); out.granted {
				return fmt.Sprintf("acquire → fence %d", out.fence)
			}
			return "acquire → held"
		case writeIn:
			return fmt.Sprintf("write(fence %d) → accepted=%v", in.fence, output.(writeOut).accepted)
		case readIn:
			return fmt.Sprintf("read → fence %d", output.(readOut).fence)
		}
		return "?"
	},
	DescribeState: func(state any) string {
		s := state.(fenceState)
		return fmt.Sprintf("issued %d, written %d", s.issued, s.written)
	},
}

type history struct {
	ops               []porcupine.Operation
	accepted, refused int
}

// runHolders runs the workload: 8 holders for two seconds, each looping
// acquire → stall (0–2×TTL) → write → sometimes read, sometimes release.
// After they stop, the oldest grant writes once more — a stale write every
// correct resource must refuse — so the history always holds at least one.
func runHolders(t *testing.T, a *e2etest.App, out report.Output) history {
	t.Helper()
	const (
		holders  = 8
		ttl      = 40 * time.Millisecond
		duration = 2 * time.Second
	)
	if out == nil {
		out = report.FencedOutput{DB: a.Pool}
	}
	leases := lease.New(a.Pool)
	reader := instance(t, a, "reader", nil)
	name := report.LeaseName(day)
	start := time.Now()
	clock := func() int64 { return time.Since(start).Nanoseconds() } // monotonic

	var (
		mu    sync.Mutex
		h     history
		first lease.Lease
	)
	record := func(client int, in, res any, call, ret int64) {
		mu.Lock()
		defer mu.Unlock()
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: res, Call: call, Return: ret})
	}
	write := func(client int, l lease.Lease) {
		r := report.Report{Date: day, Content: fmt.Sprintf("written by %s under fence %d", l.Holder, l.Fence)}
		call := clock()
		_, err := out.Write(ctx, l, r)
		ret := clock()
		if err != nil && !errors.Is(err, lease.ErrStaleFence) {
			t.Errorf("write under fence %d: %v", l.Fence, err)
			return
		}
		record(client, writeIn{l.Fence}, writeOut{err == nil}, call, ret)
		mu.Lock()
		if err == nil {
			h.accepted++
		} else {
			h.refused++
		}
		mu.Unlock()
	}

	var wg sync.WaitGroup
	for c := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("holder-%d", c)
			for time.Since(start) < duration && !t.Failed() {
				call := clock()
				l, err := leases.Acquire(ctx, name, holder, ttl)
				ret := clock()
				if errors.Is(err, lease.ErrHeld) {
					record(c, acquireIn{}, acquireOut{}, call, ret)
					time.Sleep(rand.N(ttl / 2))
					continue
				}
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				record(c, acquireIn{}, acquireOut{granted: true, fence: l.Fence}, call, ret)
				mu.Lock()
				if first.Fence == 0 || l.Fence < first.Fence {
					first = l
				}
				mu.Unlock()

				time.Sleep(rand.N(2 * ttl)) // the stall: sometimes past the TTL
				write(c, l)
				if rand.N(2) == 0 {
					call := clock()
					got, err := reader.Get(ctx, day)
					ret := clock()
					if err != nil && !errors.Is(err, report.ErrNoReport) {
						t.Errorf("read: %v", err)
						return
					}
					record(c, readIn{}, readOut{got.Fence}, call, ret)
				}
				if rand.N(2) == 0 {
					if err := leases.Release(ctx, l); err != nil && !errors.Is(err, lease.ErrLost) {
						t.Errorf("release: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
	require.NotZero(t, first.Fence)
	require.Greater(t, h.accepted, holders, "the holders must have written, or the check proves little")

	// The deterministic stale write: the oldest grant writes after newer
	// fences have.
	write(holders, first)
	t.Logf("%d operations: %d writes accepted, %d refused", len(h.ops), h.accepted, h.refused)
	return h
}

func dumpVisualization(t *testing.T, info porcupine.LinearizationInfo) {
	t.Helper()
	f, err := os.CreateTemp("", "fence-history-*.html") // kept after the test, for a human to open
	if err != nil {
		return
	}
	defer f.Close()
	if err := porcupine.Visualize(fenceModel, info, f); err == nil {
		t.Logf("porcupine visualization: %s", f.Name())
	}
}
