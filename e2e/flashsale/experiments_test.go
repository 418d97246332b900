package flashsale_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/idem"
	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// FS-01: 500 buyers, each its own HTTP client request in its own
// goroutine, released at once on 40 units. Every buyer keeps its request
// key and retries a 503 (after a short jittered pause: a crowd more
// impatient than Retry-After asks for) until it gets an answer that
// settles it. Exactly 40 are told 201 HELD, the other 460 409 sold_out;
// nothing else is ever answered; FS-R1..R3 hold.
func TestFS01FiveHundredBuyersFortyUnitsExactlyFortyHolds(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, reserve.FiveHundredBuyers)
}

// FS-02: a client disconnects in the middle of its hold and retries with
// the same key. Whether the server was before the commit (the hold rolls
// back) or after it (the hold stands and the retry returns it), the key
// ends up with exactly one reservation, and no permit is left behind. A
// client that leaves the wait line gives its place up too.
func TestFS02ClientLeavesMidHoldAndRetriesSameKeyOneReservation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		point    string
		survives bool // the hold committed before the client left
	}{
		{"leaves before the commit", reserve.PointHoldBeforeCommit, false},
		{"leaves after the commit", reserve.PointHoldAfterCommit, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := start(t, nil)
			tok := userToken(t, a, "user-0042")
			const key = "fs02-retry-0042"
			gate := a.Faults.Pause(tc.point, key)
			defer gate.Release()

			ctx, cancel := context.WithCancel(context.Background())
			sent := make(chan error, 1)
			go func() {
				_, err := a.Send(ctx, reserveReq(tok, sku, key))
				sent <- err
			}()
			<-gate.Reached()
			cancel() // the client hangs up while the server is inside the hold
			require.ErrorIs(t, <-sent, context.Canceled)
			// The server notices the closed connection, the paused hold
			// ends with its request, and its permit comes back.
			require.Eventually(t, func() bool { return inUse(t, a) == 0 }, 10*time.Second, time.Millisecond)
			holds := count(t, a, `SELECT count(*) FROM flashsale_reservation WHERE request_key = $1`, key)
			if tc.survives {
				require.Equal(t, 1, holds, "committed before the client left")
				require.Equal(t, 39, stock(t, a, sku).Available)
			} else {
				require.Equal(t, 0, holds, "rolled back with the request")
				require.Equal(t, 40, stock(t, a, sku).Available)
			}

			first := a.Do(t, reserveReq(tok, sku, key))
			again := a.Do(t, reserveReq(tok, sku, key))
			if tc.survives {
				require.Equal(t, http.StatusOK, first.Status, string(first.Body))
				require.Equal(t, "true", first.Header.Get(idem.ReplayedHeader))
			} else {
				require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
			}
			require.Equal(t, http.StatusOK, again.Status, string(again.Body))
			require.Equal(t, "true", again.Header.Get(idem.ReplayedHeader))
			r1, r2 := decode(t, first), decode(t, again)
			require.Equal(t, r1, r2, "the retry returns the same reservation")
			require.Equal(t, reserve.StateHeld, r1.State)

			require.Equal(t, 1, count(t, a, `SELECT count(*) FROM flashsale_reservation WHERE request_key = $1`, key))
			require.Equal(t, 1, count(t, a, `SELECT count(*) FROM flashsale_reservation`))
			require.Equal(t, 39, stock(t, a, sku).Available)
			invariant.Assert(t, a.Pool, "flashsale")
		})
	}

	t.Run("leaves the wait line", func(t *testing.T) {
		t.Parallel()
		a := start(t, map[string]string{reserve.EnvLimit: "1", reserve.EnvWaitLine: "4", reserve.EnvMaxWait: "0s"})
		first, second := userToken(t, a, "user-0001"), userToken(t, a, "user-0002")
		gate := a.Faults.Pause(reserve.PointHoldBeforeCommit, "fs02-first")
		defer gate.Release()
		firstDone := make(chan e2etest.Response, 1)
		go func() { firstDone <- a.Do(t, reserveReq(first, sku, "fs02-first")) }()
		<-gate.Reached() // the only permit is taken

		ctx, cancel := context.WithCancel(context.Background())
		sent := make(chan error, 1)
		go func() {
			_, err := a.Send(ctx, reserveReq(second, sku, "fs02-second"))
			sent <- err
		}()
		require.Eventually(t, func() bool { return waiting(t, a) == 1 }, 10*time.Second, time.Millisecond)
		cancel()
		require.ErrorIs(t, <-sent, context.Canceled)
		require.Eventually(t, func() bool { return waiting(t, a) == 0 }, 10*time.Second, time.Millisecond)
		require.Equal(t, 1, inUse(t, a), "leaving the line took no permit")

		gate.Release()
		require.Equal(t, http.StatusCreated, (<-firstDone).Status)
		require.Equal(t, 0, inUse(t, a))
		r := a.Do(t, reserveReq(second, sku, "fs02-second"))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Equal(t, 2, count(t, a, `SELECT count(*) FROM flashsale_reservation`))
		require.Equal(t, 1, peakInDB(t, a))
		invariant.Assert(t, a.Pool, "flashsale")
	})
}

// FS-03: a request key belongs to the reservation it made. The same key
// from another user, or from the same user for another SKU, is a 422 and
// writes nothing.
func TestFS03SameKeyFromAnotherUserOrSKUIs422(t *testing.T) {
	t.Parallel()
	a := start(t, nil)
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, `INSERT INTO flashsale_sku (sku, total, available) VALUES ('sku-lab-02', 5, 5)`)
	require.NoError(t, err)
	owner, other := userToken(t, a, "user-0042"), userToken(t, a, "user-0043")
	const key = "fs03-shared-key"

	r := a.Do(t, reserveReq(owner, sku, key))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	mine := decode(t, r)

	for name, req := range map[string]e2etest.Req{
		"another user":             reserveReq(other, sku, key),
		"another user, other sku":  reserveReq(other, "sku-lab-02", key),
		"same user, another sku":   reserveReq(owner, "sku-lab-02", key),
		"another user, key header": {Method: http.MethodPost, Path: "/flashsale/reservations", Token: other, Body: `{"sku":"sku-lab-01"}`, Headers: map[string]string{idem.Header: key}},
	} {
		r := a.Do(t, req)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, "request_key_reused", r.Code(), name)
	}
	// The owner still gets its reservation back, through either carrier.
	for _, req := range []e2etest.Req{
		reserveReq(owner, sku, key),
		{Method: http.MethodPost, Path: "/flashsale/reservations", Token: owner, Body: `{"sku":"sku-lab-01"}`, Headers: map[string]string{idem.Header: key}},
		{Method: http.MethodPost, Path: "/flashsale/reservations", Token: owner, Body: `{"sku":"sku-lab-01"}`, Headers: map[string]string{idem.Header: `"` + key + `"`}},
	} {
		r := a.Do(t, req)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, mine, decode(t, r))
	}

	require.Equal(t, 1, count(t, a, `SELECT count(*) FROM flashsale_reservation`))
	require.Equal(t, 0, count(t, a, `SELECT count(*) FROM flashsale_reservation WHERE user_id = 'user-0043'`))
	require.Equal(t, 39, stock(t, a, sku).Available)
	require.Equal(t, 5, stock(t, a, "sku-lab-02").Available)
	invariant.Assert(t, a.Pool, "flashsale")
}

// FS-04: limit 8, wait line 16, 200 simultaneous buyers. Every admitted
// hold is held inside the database (a fault point before its commit)
// until the test has seen the rest: 8 are in the database, 16 wait, and
// the other 176 have already been answered 503 + Retry-After — without
// waiting for any database work. Then the holds go ahead: 24 HELD. The
// database concurrency, counted server-side around the hold itself, never
// passed 8.
func TestFS04LimitEightLineSixteenTwoHundredAtOnceOverflowIs503AtOnce(t *testing.T) {
	t.Parallel()
	const limit, line, buyers = 8, 16, 200
	a := start(t, map[string]string{reserve.EnvLimit: strconv.Itoa(limit), reserve.EnvWaitLine: strconv.Itoa(line), reserve.EnvMaxWait: "0s"})
	proceed := make(chan struct{})
	a.Faults.ArmFunc(reserve.PointHoldBeforeCommit, func(ctx context.Context, _ string) error {
		select { // every hold waits here, its unit taken, until the test says go
		case <-proceed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	tokens := make([]string, buyers)
	for i := range buyers {
		tokens[i] = userToken(t, a, user(i+1))
	}
	type answer struct {
		r       e2etest.Response
		err     error
		latency time.Duration
	}
	answers := make(chan answer, buyers)
	gate := make(chan struct{})
	var ready sync.WaitGroup
	for i := range buyers {
		ready.Add(1)
		go func() {
			ready.Done()
			<-gate
			start := time.Now()
			r, err := a.Send(context.Background(), reserveReq(tokens[i], sku, fmt.Sprintf("fs04-%04d", i+1)))
			answers <- answer{r, err, time.Since(start)}
		}()
	}
	ready.Wait()
	close(gate)

	// While every admitted hold is held: the overflow is answered.
	var slowest503 time.Duration
	for range buyers - limit - line {
		ans := <-answers
		require.NoError(t, ans.err)
		require.Equal(t, http.StatusServiceUnavailable, ans.r.Status, string(ans.r.Body))
		require.Equal(t, "overloaded", ans.r.Code())
		require.Equal(t, "1", ans.r.Header.Get("Retry-After"))
		slowest503 = max(slowest503, ans.latency)
	}
	require.Eventually(t, func() bool { return inUse(t, a) == limit && waiting(t, a) == line }, 10*time.Second, time.Millisecond)
	select {
	case ans := <-answers:
		t.Fatalf("an answer beyond the overflow arrived while every hold was held: %d %s", ans.r.Status, ans.r.Body)
	default:
	}
	require.Equal(t, limit, peakInDB(t, a))

	close(proceed)
	held := 0
	for range limit + line {
		ans := <-answers
		require.NoError(t, ans.err)
		require.Equal(t, http.StatusCreated, ans.r.Status, string(ans.r.Body))
		held++
	}
	t.Logf("FS-04: %d answered 503 while %d were in the database and %d waited (slowest 503 %v); then %d held; peak in database %d",
		buyers-limit-line, limit, line, slowest503.Round(time.Microsecond), held, peakInDB(t, a))
	require.Equal(t, limit, peakInDB(t, a), "never more than the limit in the database")
	require.Equal(t, 0, inUse(t, a))
	require.Equal(t, 0, waiting(t, a))
	require.Equal(t, limit+line, count(t, a, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`))
	require.Equal(t, 40-limit-line, stock(t, a, sku).Available)
	invariant.Assert(t, a.Pool, "flashsale")
}

// FS-05: 40 holds expire (by SQL). Two release runs overlap — the
// periodic claim job, paused inside its first batch (its 10 rows released
// and locked, the SKU row updated, not committed), and the admin route,
// which skips the job's locked rows, releases others and then waits for
// the job's transaction on the SKU row — and a third runs after both:
// every unit comes back once. Then 40 more holds expire and three runs
// start at once: again 40 in total, each once (FS-R5).
func TestFS05ReleaseRunsTwiceConcurrentlyAndOnceMoreEachUnitReturnedOnce(t *testing.T) {
	t.Parallel()
	e2etest.Experiment(t, reserve.ReleaseRacesItself)
}
