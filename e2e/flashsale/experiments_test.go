package flashsale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/idem"
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
	a := start(t, nil)
	const buyers = 500
	tokens := make([]string, buyers)
	for i := range buyers {
		tokens[i] = userToken(t, a, user(i+1))
	}
	type outcome struct {
		final    e2etest.Response
		overload int // 503s before the final answer
		err      error
	}
	out := make([]outcome, buyers)
	gate := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range buyers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			key := fmt.Sprintf("fs01-%04d", i+1)
			ready.Done()
			<-gate
			for {
				r, err := a.Send(context.Background(), reserveReq(tokens[i], sku, key))
				if err != nil || r.Status != http.StatusServiceUnavailable {
					out[i].final, out[i].err = r, err
					return
				}
				if r.Code() != "overloaded" || r.Header.Get("Retry-After") == "" {
					out[i].final = r // not a limiter 503: report it below
					return
				}
				out[i].overload++
				time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
			}
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()

	held, soldOut, overloaded := map[int64]int{}, 0, 0
	for i, o := range out {
		require.NoError(t, o.err, "buyer %d", i+1)
		overloaded += o.overload
		switch o.final.Status {
		case http.StatusCreated:
			r := decode(t, o.final)
			require.Equal(t, reserve.StateHeld, r.State)
			require.Equal(t, user(i+1), r.UserID)
			require.True(t, r.ExpiresAt.After(r.CreatedAt))
			held[r.ID] = i
		case http.StatusConflict:
			require.Equal(t, "sold_out", o.final.Code(), "buyer %d: %s", i+1, o.final.Body)
			soldOut++
		default:
			t.Fatalf("buyer %d: %d %s", i+1, o.final.Status, o.final.Body)
		}
	}
	t.Logf("FS-01: %d held, %d sold_out, %d overloaded answers on the way (peak in database %d)",
		len(held), soldOut, overloaded, peakInDB(t, a))
	require.Len(t, held, 40)
	require.Equal(t, buyers-40, soldOut)

	s := stock(t, a, sku)
	require.Equal(t, reserve.Stock{SKU: sku, Stock: 40, Available: 0, Held: 40}, s)
	require.Equal(t, 40, count(t, a, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`))
	require.Equal(t, 40, count(t, a, `SELECT count(*) FROM flashsale_reservation`), "a refused request wrote nothing")
	require.LessOrEqual(t, peakInDB(t, a), reserve.DefaultConfig().Limit)
	e2etest.Assert(t, a.Pool, "flashsale")
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
			e2etest.Assert(t, a.Pool, "flashsale")
		})
	}

	t.Run("leaves the wait line", func(t *testing.T) {
		t.Parallel()
		a := start(t, map[string]string{reserve.EnvLimit: "1", reserve.EnvWaitLine: "4", reserve.EnvMaxWait: "0s"})
		first, second := userToken(t, a, "user-0001"), userToken(t, a, "user-0002")
		gate := a.Faults.Pause(reserve.PointHoldBeforeCommit, "fs02-first")
		defer gate.Release()
		firstDone := a.Go(reserveReq(first, sku, "fs02-first"))
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
		require.Equal(t, http.StatusCreated, firstDone.Wait(t).Status)
		require.Equal(t, 0, inUse(t, a))
		r := a.Do(t, reserveReq(second, sku, "fs02-second"))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Equal(t, 2, count(t, a, `SELECT count(*) FROM flashsale_reservation`))
		require.Equal(t, 1, peakInDB(t, a))
		e2etest.Assert(t, a.Pool, "flashsale")
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
	e2etest.Assert(t, a.Pool, "flashsale")
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
	e2etest.Assert(t, a.Pool, "flashsale")
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
	a := start(t, map[string]string{reserve.EnvReleaseBatch: "10"})
	ctx := context.Background()
	admin := a.Token(t, "admin-0001", httpx.RoleAdmin)
	holdAll := func(round int) {
		for i := range 40 {
			tok := userToken(t, a, user(round*100+i+1))
			r := a.Do(t, reserveReq(tok, sku, fmt.Sprintf("fs05-%d-%02d", round, i+1)))
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		}
		require.Equal(t, 0, stock(t, a, sku).Available)
		// Expire them: the release sees what it would see TTL later.
		_, err := a.Pool.Exec(ctx, `UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE state = 'HELD'`)
		require.NoError(t, err)
	}
	releaseByAdmin := func() int {
		r := a.Do(t, e2etest.Req{Method: http.MethodPost, Path: "/flashsale/admin/release-expired", Token: admin})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var body struct{ Released int }
		r.JSON(t, &body)
		return body.Released
	}
	releaseByJob := func(slot string) int {
		_, _, err := a.Deps.Jobs.Enqueue(ctx, a.Pool, claim.NewJob{Kind: reserve.ReleaseKind, BusinessKey: slot})
		require.NoError(t, err)
		jobs, err := a.Deps.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{reserve.ReleaseKind}})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.NoError(t, a.Deps.Jobs.Execute(ctx, jobs[0]))
		j, _, err := a.Deps.Jobs.Get(ctx, jobs[0].ID, 0)
		require.NoError(t, err)
		require.Equal(t, claim.StateSucceeded, j.State)
		var result struct{ Released int }
		require.NoError(t, json.Unmarshal(j.Result, &result))
		return result.Released
	}

	holdAll(0)
	gate := a.Faults.Pause(reserve.PointReleaseBeforeCommit, sku)
	byJob, byAdmin := make(chan int, 1), make(chan int, 1)
	go func() { byJob <- releaseByJob("fs05-a") }()
	<-gate.Reached() // the job has released its first 10 inside its transaction
	go func() { byAdmin <- releaseByAdmin() }()
	// The admin run has taken rows the job did not lock and now waits for
	// the job's transaction on the SKU row.
	e2etest.WaitForLockWaiters(t, a.Pool, "SKIP LOCKED", 1)
	gate.Release()
	jobReleased, adminReleased := <-byJob, <-byAdmin
	again := releaseByAdmin()
	t.Logf("FS-05 overlapping runs: job %d, admin %d, rerun %d", jobReleased, adminReleased, again)
	require.GreaterOrEqual(t, jobReleased, 10, "the paused batch committed")
	require.GreaterOrEqual(t, adminReleased, 10, "the admin run released rows the job had not locked")
	require.Equal(t, 40, jobReleased+adminReleased)
	require.Equal(t, 0, again)
	require.Equal(t, reserve.Stock{SKU: sku, Stock: 40, Available: 40}, stock(t, a, sku))
	e2etest.Assert(t, a.Pool, "flashsale")

	holdAll(1)
	results := make(chan int, 3)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, run := range []func() int{releaseByAdmin, releaseByAdmin, func() int { return releaseByJob("fs05-b") }} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n := run()
			t.Logf("FS-05 free race: run %d released %d", i+1, n)
			results <- n
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	sum := 0
	for n := range results {
		sum += n
	}
	require.Equal(t, 40, sum, "three racing runs returned each unit once")
	require.Equal(t, 0, releaseByAdmin())
	require.Equal(t, reserve.Stock{SKU: sku, Stock: 40, Available: 40}, stock(t, a, sku))
	require.Equal(t, 80, count(t, a, `SELECT count(*) FROM flashsale_stock_move WHERE reason = 'release'`))
	require.Equal(t, 80, count(t, a, `SELECT count(DISTINCT reservation_id) FROM flashsale_stock_move WHERE reason = 'release'`))
	require.Equal(t, 80, count(t, a, `SELECT count(*) FROM flashsale_reservation WHERE state = 'RELEASED'`))
	e2etest.Assert(t, a.Pool, "flashsale")
}
