package reservations

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/flashsale/reserve"
)

// Experiments are the reservations chapter's runnable claims.
var Experiments = []lab.Experiment{FiveHundredBuyers, ClientLeavesMidHold, KeyBelongsToItsReservation, BoundedAdmission, ReleaseRacesItself}

// labSKU is the sale the experiments open: the book's 40 units.
const (
	labSKU   = "sku-lab-01"
	labUnits = 40
)

// FiveHundredBuyers is FS-01: 500 buyers, each its own HTTP request in its
// own goroutine, released at once on 40 units. Every buyer keeps its
// request key and retries a 503 until an answer settles it. Exactly 40 are
// told 201 HELD, the other 460 409 sold_out; nothing else is ever answered.
//
// The naive version is the book's check-then-insert: read `available`,
// decide in Go that a unit is left, write `available = read − 1` and insert
// the reservation. The five hundred buyers of the claim all read 40 before
// anyone writes: five hundred holds on forty units, and FS-R1 reports the
// oversold SKU.
var FiveHundredBuyers = lab.Experiment{
	ID:         "reservations/five-hundred-buyers",
	Test:       "TestFS01FiveHundredBuyersFortyUnitsExactlyFortyHolds",
	Claim:      "500 buyers released at once on 40 units: exactly 40 holds, 460 sold_out, no oversell, admission bounded",
	Overlap:    true,
	Invariants: []string{reserve.Module},
	Naive:      "check-then-insert: read available, decide in Go, write available = read − 1 and insert the hold",
	Catches:    []string{"FS-R1"},
	Control:    "the same check-then-insert by one buyer: nothing interleaves, one hold, available 39",
	Run:        runFiveHundredBuyers,
	Explore:    lastUnitExplore,
}

func runFiveHundredBuyers(x *lab.X) {
	a := x.Start(lab.Options{})
	_, err := reserve.NewInventory(reserve.InventoryOptions{}).CreateSKU(context.Background(), a.Pool, labSKU, labUnits)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("put %d units of %s on sale", labUnits, labSKU), Outcome: lab.Accepted})
	if x.Naive {
		buyers := 500 // the five hundred of the name
		if x.Control {
			buyers = 1
		}
		naiveHolds(x, a, buyers)
		return
	}
	const buyers = 500
	type outcome struct {
		status   int
		code     string
		overload int // 503s before the final answer
		err      error
	}
	out := make([]outcome, buyers)
	// Every buyer's token is minted before the start, so the crowd released
	// together is 500 requests, not 500 token signings.
	toks := make([]string, buyers)
	for i := range buyers {
		toks[i] = a.Token(x, fmt.Sprintf("user-%04d", i+1), httpx.RoleUser)
	}
	lab.AtOnce(buyers, func(i int) {
		actor := fmt.Sprintf("buyer-%03d", i+1)
		tok := toks[i]
		key := fmt.Sprintf("fs01-%04d", i+1)
		r, overload, err := labkit.SendPastOverload(context.Background(), a, lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations",
			Token: tok, Body: reserve.ReserveRequest{SKU: labSKU, RequestKey: key}})
		out[i].status, out[i].code, out[i].overload, out[i].err = r.Status, r.Code(), overload, err
		step := lab.Step{Actor: actor, Action: "hold 1 unit", Note: fmt.Sprintf("after %d × 503 overloaded", out[i].overload)}
		switch {
		case err != nil:
			step.Outcome, step.Note = "transport error", err.Error()
		case r.Status == http.StatusCreated:
			var res reserve.Reservation
			r.JSON(x, &res)
			step.Outcome, step.Note = "held", fmt.Sprintf("reservation %d, %s", res.ID, step.Note)
		default:
			step.Outcome = r.Code()
		}
		x.Step(step)
	})

	held, soldOut, overloaded := 0, 0, 0
	for i, o := range out {
		require.NoError(x, o.err, "buyer %d", i+1)
		overloaded += o.overload
		switch {
		case o.status == http.StatusCreated:
			held++
		case o.status == http.StatusConflict && o.code == "sold_out":
			soldOut++
		default:
			x.Fatalf("buyer %d: %d %s", i+1, o.status, o.code)
		}
	}
	peak := int(a.Gauge(x, "fencelab_flashsale_reservation_ops_in_db_peak"))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d HELD, %d available; at most %d holds ran in the database at once",
		a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`),
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU), peak)})
	x.Figure("buyers", buyers)
	x.Figure("held", held)
	x.Figure("sold_out", soldOut)
	x.Figure("overloaded_answers", overloaded)
	x.Figure("peak_in_db", peak)
	require.Equal(x, labUnits, held)
	require.Equal(x, buyers-labUnits, soldOut)
	require.Equal(x, labUnits, a.Count(x, `SELECT count(*) FROM flashsale_reservation`), "a refused request wrote nothing")
	require.Zero(x, a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU))
	require.LessOrEqual(x, peak, reserve.DefaultConfig().Limit)
}

// naiveHolds is check-then-insert, done by the experiment to the scratch
// database: the product's hold is one guarded statement (FS-R1).
func naiveHolds(x *lab.X, a *lab.App, buyers int) {
	ctx := context.Background()
	var read sync.WaitGroup
	read.Add(buyers)
	lab.AtOnce(buyers, func(i int) {
		actor := fmt.Sprintf("buyer-%03d", i+1)
		var available int
		err := a.Pool.QueryRow(ctx, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU).Scan(&available)
		read.Done()
		read.Wait() // everyone has looked before anyone writes
		if err != nil {
			x.Error(actor, "read available", err)
			return
		}
		if available < 1 {
			x.Step(lab.Step{Actor: actor, Action: fmt.Sprintf("read available %d", available), Outcome: "sold_out"})
			return
		}
		tx, err := a.Pool.Begin(ctx)
		if err != nil {
			x.Error(actor, "begin", err)
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
		id, err := naiveHold(ctx, tx, labSKU, available, fmt.Sprintf("user-%04d", i+1), fmt.Sprintf("naive-%04d", i+1))
		if err == nil {
			err = tx.Commit(ctx)
		}
		action := fmt.Sprintf("read available %d, write %d, insert hold", available, available-1)
		if err != nil {
			x.Error(actor, action, err)
			return
		}
		x.Step(lab.Step{Actor: actor, Action: action, Outcome: lab.Accepted, Note: fmt.Sprintf("reservation %d", id)})
	})
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d HELD on %d units, available %d",
		a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`), labUnits,
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU))})
}

// naiveHold is the naive hold's write in tx, the decision already taken
// in Go on the available count read: available set to that count minus
// one, the reservation inserted HELD and its stock move recorded — no
// guard, no constraint in the way. naiveHolds and the exploration's
// naive actors (naiveHoldSteps) write with it.
func naiveHold(ctx context.Context, tx pgx.Tx, sku string, available int, user, key string) (int64, error) {
	var id int64
	_, err := tx.Exec(ctx, `UPDATE flashsale_sku SET available = $2 WHERE sku = $1`, sku, available-1)
	if err == nil {
		err = tx.QueryRow(ctx, `INSERT INTO flashsale_reservation (sku, user_id, request_key, state, expires_at)
		                        VALUES ($1, $2, $3, 'HELD', now() + interval '5 minutes') RETURNING id`, sku, user, key).Scan(&id)
	}
	if err == nil {
		_, err = tx.Exec(ctx, `INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta) VALUES ($1, $2, 'hold', -1)`, sku, id)
	}
	return id, err
}

// ReleaseRacesItself is FS-05: the expiry release runs twice at once (the
// periodic job, paused inside its transaction after its first batch, and
// an admin run that skips the job's locked rows, then waits for its
// transaction on the SKU row), and once more after both; then three runs
// start together. Every expired unit comes back exactly once.
//
// The naive release reads the expired holds, then marks them released,
// logs each return and adds their count to `available` — no state
// condition, no unique key on the log, no CHECK. Two runs that read the
// same 40 holds give back 80 units: FS-R1 reports 80 available of 40, FS-R5
// each hold returned twice. Its control is one run: 40 back, all holding.
var ReleaseRacesItself = lab.Experiment{
	ID:         "reservations/release-races-itself",
	Test:       "TestFS05ReleaseRunsTwiceConcurrentlyAndOnceMoreEachUnitReturnedOnce",
	Claim:      "the expiry release racing itself (job, admin, rerun; then three at once) returns each expired unit exactly once",
	Overlap:    true,
	Invariants: []string{reserve.Module},
	Naive:      "read the expired holds, then mark them released, log the returns and add their count to available — no state condition, no unique key on the log",
	Catches:    []string{"FS-R1", "FS-R5"},
	Control:    "one naive release run alone: nothing races it",
	Run:        runReleaseRacesItself,
}

func runReleaseRacesItself(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{Settings: map[string]string{reserve.EnvReleaseBatch: "10"}})
	_, err := reserve.NewInventory(reserve.InventoryOptions{}).CreateSKU(ctx, a.Pool, labSKU, labUnits)
	require.NoError(x, err)
	admin := a.Token(x, "admin-0001", httpx.RoleAdmin)
	holdAll := func(round int) {
		for i := range labUnits {
			tok := a.Token(x, fmt.Sprintf("user-%04d", round*100+i+1), httpx.RoleUser)
			r := a.Do(x, lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok,
				Body: reserve.ReserveRequest{SKU: labSKU, RequestKey: fmt.Sprintf("fs05-%d-%02d", round, i+1)}})
			require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
		}
		// Expire them: the release sees what it would see a TTL later.
		_, err := a.Pool.Exec(ctx, `UPDATE flashsale_reservation SET expires_at = now() - interval '1 second' WHERE state = 'HELD'`)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: "buyers", Action: fmt.Sprintf("hold all %d units; the holds expire", labUnits), Outcome: lab.Accepted})
	}
	releaseByAdmin := func(actor string) int {
		r := a.Do(x, lab.Req{Method: http.MethodPost, Path: "/flashsale/admin/release-expired", Token: admin})
		require.Equal(x, http.StatusOK, r.Status, string(r.Body))
		var body struct{ Released int }
		r.JSON(x, &body)
		x.Step(lab.Step{Actor: actor, Action: "release expired holds", Outcome: lab.Accepted, Note: fmt.Sprintf("%d units back", body.Released)})
		return body.Released
	}
	releaseByJob := func(actor, slot string) int {
		_, _, err := a.Jobs.Enqueue(ctx, a.Pool, claim.NewJob{Kind: reserve.ReleaseKind, BusinessKey: slot})
		require.NoError(x, err)
		jobs, err := a.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{reserve.ReleaseKind}})
		require.NoError(x, err)
		require.Len(x, jobs, 1)
		x.Step(lab.Step{Actor: actor, Action: "claim " + reserve.ReleaseKind + " job", Outcome: lab.Accepted, Fence: jobs[0].Fence})
		require.NoError(x, a.Jobs.Execute(ctx, jobs[0]))
		j, _, err := a.Jobs.Get(ctx, jobs[0].ID, 0)
		require.NoError(x, err)
		require.Equal(x, claim.StateSucceeded, j.State)
		var result struct{ Released int }
		require.NoError(x, json.Unmarshal(j.Result, &result))
		x.Step(lab.Step{Actor: actor, Action: "release expired holds", Outcome: lab.Accepted, Fence: jobs[0].Fence,
			Note: fmt.Sprintf("%d units back", result.Released)})
		return result.Released
	}

	holdAll(0)
	if x.Naive {
		naiveRelease(x, a)
		return
	}
	gate := a.Faults.Pause(reserve.PointReleaseBeforeCommit, labSKU)
	byJob, byAdmin := make(chan int, 1), make(chan int, 1)
	go func() { byJob <- releaseByJob("worker", "fs05-a") }()
	<-gate.Reached()
	x.Step(lab.Step{Actor: "worker", Action: "paused before commit, its first 10 rows locked"})
	go func() { byAdmin <- releaseByAdmin("admin") }()
	// The admin run took the rows the job did not lock and now waits for the
	// job's transaction on the SKU row.
	lab.WaitFor(x, 10*time.Second, "the admin run to wait on the SKU row", func() bool {
		return a.Count(x, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		                     AND wait_event_type = 'Lock' AND query LIKE '%SKIP LOCKED%'`) == 1
	})
	x.Step(lab.Step{Actor: "admin", Action: "skipped the locked rows, waits for the SKU row"})
	gate.Release()
	jobReleased, adminReleased := <-byJob, <-byAdmin
	again := releaseByAdmin("admin")
	require.GreaterOrEqual(x, jobReleased, 10, "the paused batch committed")
	require.GreaterOrEqual(x, adminReleased, 10, "the admin run released rows the job had not locked")
	require.Equal(x, labUnits, jobReleased+adminReleased)
	require.Zero(x, again)

	holdAll(1)
	results := make(chan int, 3)
	runs := []func() int{
		func() int { return releaseByAdmin("admin-1") },
		func() int { return releaseByAdmin("admin-2") },
		func() int { return releaseByJob("worker", "fs05-b") },
	}
	lab.AtOnce(len(runs), func(i int) { results <- runs[i]() })
	close(results)
	sum := 0
	for n := range results {
		sum += n
	}
	x.Figure("units_returned", 2*labUnits)
	x.Figure("release_log_rows", a.Count(x, `SELECT count(*) FROM flashsale_stock_move WHERE reason = 'release'`))
	require.Equal(x, labUnits, sum, "three racing runs returned each unit once")
	require.Zero(x, releaseByAdmin("admin"))
	require.Equal(x, labUnits, a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU))
	require.Equal(x, 2*labUnits, a.Count(x, `SELECT count(DISTINCT reservation_id) FROM flashsale_stock_move WHERE reason = 'release'`))
	require.Equal(x, 2*labUnits, a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE state = 'RELEASED'`))
}

// naiveRelease is two release runs written read-then-write, done by the
// experiment to the scratch database (the product's release is one
// conditional statement with a log whose unique key refuses a second
// return, FS-R5).
func naiveRelease(x *lab.X, a *lab.App) {
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, `ALTER TABLE flashsale_sku DROP CONSTRAINT flashsale_sku_available;
	                           ALTER TABLE flashsale_stock_move DROP CONSTRAINT flashsale_stock_move_once;
	                           DROP TRIGGER flashsale_reservation_guard ON flashsale_reservation`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: the CHECK on available, the stock log's unique key and the transition guard dropped"})
	actors := []string{"worker", "admin"}
	if x.Control {
		actors = actors[:1] // one run: nothing races it
	}
	var wg, read sync.WaitGroup
	read.Add(len(actors))
	for _, actor := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows, err := a.Pool.Query(ctx, `SELECT id FROM flashsale_reservation WHERE state = 'HELD' AND expires_at <= now()`)
			var ids []int64
			for err == nil && rows.Next() {
				var id int64
				err = rows.Scan(&id)
				ids = append(ids, id)
			}
			if rows != nil {
				rows.Close()
			}
			read.Done()
			read.Wait() // both runs have read before either writes
			if err == nil {
				_, err = a.Pool.Exec(ctx, `UPDATE flashsale_reservation SET state = 'RELEASED', released_at = now() WHERE id = ANY($1)`, ids)
			}
			if err == nil {
				_, err = a.Pool.Exec(ctx, `INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta)
				                           SELECT $1, unnest($2::bigint[]), 'release', 1`, labSKU, ids)
			}
			if err == nil {
				_, err = a.Pool.Exec(ctx, `UPDATE flashsale_sku SET available = available + $2 WHERE sku = $1`, labSKU, len(ids))
			}
			action := fmt.Sprintf("read %d expired holds, give their units back", len(ids))
			if err != nil {
				x.Error(actor, action, err)
				return
			}
			x.Step(lab.Step{Actor: actor, Action: action, Outcome: lab.Accepted})
		}()
	}
	wg.Wait()
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: available %d of %d units",
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU), labUnits)})
}

// labSale opens the experiments' sale on a fresh app with settings.
func labSale(x *lab.X, settings map[string]string) *lab.App {
	x.Helper()
	a := x.Start(lab.Options{Settings: settings})
	_, err := reserve.NewInventory(reserve.InventoryOptions{}).CreateSKU(context.Background(), a.Pool, labSKU, labUnits)
	require.NoError(x, err)
	return a
}

func holdReq(tok, sku, key string) lab.Req {
	return lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok,
		Body: reserve.ReserveRequest{SKU: sku, RequestKey: key}}
}

func available(x *lab.X, a *lab.App, sku string) int {
	return a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, sku)
}

func inUse(x *lab.X, a *lab.App) int {
	return int(a.Gauge(x, "fencelab_admission_in_use", "limiter", reserve.LimiterName))
}

func waiting(x *lab.X, a *lab.App) int {
	return int(a.Gauge(x, "fencelab_admission_waiting", "limiter", reserve.LimiterName))
}

// ClientLeavesMidHold is FS-02: a client hangs up in the middle of its
// hold and retries with the same key. Before the commit the hold rolls
// back, after it the hold stands and the retry returns it: either way the
// key ends with exactly one reservation and no permit is left behind. A
// client that leaves the wait line gives its place up too.
var ClientLeavesMidHold = lab.Experiment{
	ID:         "reservations/client-leaves-mid-hold",
	Test:       "TestFS02ClientLeavesMidHoldAndRetriesSameKeyOneReservation",
	Claim:      "a client that hangs up mid-hold and retries with its key gets exactly one reservation; no permit or place in line is left behind",
	Invariants: []string{reserve.Module},
	Run: func(x *lab.X) {
		for _, tc := range []struct {
			name     string
			point    string
			survives bool // the hold committed before the client left
		}{
			{"before the commit", reserve.PointHoldBeforeCommit, false},
			{"after the commit", reserve.PointHoldAfterCommit, true},
		} {
			a := labSale(x, nil)
			tok := a.Token(x, "user-0042", httpx.RoleUser)
			key := "fs02-retry-0042"
			gate := a.Faults.Pause(tc.point, key)
			x.Cleanup(gate.Release)
			ctx, cancel := context.WithCancel(context.Background())
			sent := make(chan error, 1)
			go func() {
				_, err := a.Send(ctx, holdReq(tok, labSKU, key))
				sent <- err
			}()
			<-gate.Reached()
			x.Step(lab.Step{Actor: "client", Action: "hold, key " + key, Note: "server paused " + tc.name})
			cancel() // the client hangs up while the server is inside the hold
			require.ErrorIs(x, <-sent, context.Canceled)
			x.Step(lab.Step{Actor: "client", Action: "hang up " + tc.name, Outcome: lab.Lost})
			// The server notices the closed connection; the paused hold ends
			// with its request and its permit comes back.
			lab.WaitFor(x, 10*time.Second, "the permit to come back", func() bool { return inUse(x, a) == 0 })
			holds := a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE request_key = $1`, key)
			x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("%d reservation under the key, %d available", holds, available(x, a, labSKU))})
			if tc.survives {
				require.Equal(x, 1, holds, "committed before the client left")
			} else {
				require.Equal(x, 0, holds, "rolled back with the request")
			}
			first := a.Do(x, holdReq(tok, labSKU, key))
			again := a.Do(x, holdReq(tok, labSKU, key))
			for _, r := range []lab.Response{first, again} {
				outcome := lab.Accepted
				if r.Header.Get("Idempotent-Replayed") == "true" {
					outcome = lab.Replayed
				}
				x.Step(lab.Step{Actor: "client", Action: "retry with key " + key, Outcome: outcome, Note: fmt.Sprint(r.Status)})
			}
			if tc.survives {
				require.Equal(x, http.StatusOK, first.Status, string(first.Body))
			} else {
				require.Equal(x, http.StatusCreated, first.Status, string(first.Body))
			}
			require.Equal(x, http.StatusOK, again.Status, string(again.Body))
			require.Equal(x, "true", again.Header.Get("Idempotent-Replayed"))
			var r1, r2 reserve.Reservation
			first.JSON(x, &r1)
			again.JSON(x, &r2)
			require.Equal(x, r1, r2, "the retry returns the same reservation")
			require.Equal(x, reserve.StateHeld, r1.State)
			require.Equal(x, 1, a.Count(x, `SELECT count(*) FROM flashsale_reservation`))
			require.Equal(x, labUnits-1, available(x, a, labSKU))
			x.Assert(a.Pool, reserve.Module) // each sale's own database
		}

		// Leaving the wait line.
		a := labSale(x, map[string]string{reserve.EnvLimit: "1", reserve.EnvWaitLine: "4", reserve.EnvMaxWait: "0s"})
		x.CheckOn(a.DBURL)
		first, second := a.Token(x, "user-0001", httpx.RoleUser), a.Token(x, "user-0002", httpx.RoleUser)
		gate := a.Faults.Pause(reserve.PointHoldBeforeCommit, "fs02-first")
		defer gate.Release()
		firstDone := make(chan lab.Response, 1)
		go func() {
			r, _ := a.Send(context.Background(), holdReq(first, labSKU, "fs02-first"))
			firstDone <- r
		}()
		<-gate.Reached()
		x.Step(lab.Step{Actor: "client-1", Action: "hold", Note: "holds the only permit (paused before commit)"})
		ctx, cancel := context.WithCancel(context.Background())
		sent := make(chan error, 1)
		go func() {
			_, err := a.Send(ctx, holdReq(second, labSKU, "fs02-second"))
			sent <- err
		}()
		lab.WaitFor(x, 10*time.Second, "client-2 to wait in line", func() bool { return waiting(x, a) == 1 })
		x.Step(lab.Step{Actor: "client-2", Action: "hold", Note: "waits in line"})
		cancel()
		require.ErrorIs(x, <-sent, context.Canceled)
		lab.WaitFor(x, 10*time.Second, "the line to empty", func() bool { return waiting(x, a) == 0 })
		x.Step(lab.Step{Actor: "client-2", Action: "hang up in line", Outcome: lab.Lost, Note: "its place is given up"})
		require.Equal(x, 1, inUse(x, a), "leaving the line took no permit")
		gate.Release()
		require.Equal(x, http.StatusCreated, (<-firstDone).Status)
		x.Step(lab.Step{Actor: "client-1", Action: "hold commits", Outcome: lab.Accepted})
		require.Equal(x, 0, inUse(x, a))
		r := a.Do(x, holdReq(second, labSKU, "fs02-second"))
		require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
		x.Step(lab.Step{Actor: "client-2", Action: "retry hold", Outcome: lab.Accepted})
		require.Equal(x, 2, a.Count(x, `SELECT count(*) FROM flashsale_reservation`))
		require.Equal(x, 1, int(a.Gauge(x, "fencelab_flashsale_reservation_ops_in_db_peak")))
	},
}

// KeyBelongsToItsReservation is FS-03: a request key belongs to the
// reservation it made. The same key from another user, or for another
// SKU, is a 422 and writes nothing; the owner still gets its reservation.
var KeyBelongsToItsReservation = lab.Experiment{
	ID:         "reservations/key-belongs-to-its-reservation",
	Test:       "TestFS03SameKeyFromAnotherUserOrSKUIs422",
	Claim:      "a request key belongs to the reservation it made: from another user or for another SKU it is a 422 and writes nothing",
	Invariants: []string{reserve.Module},
	Run: func(x *lab.X) {
		a := labSale(x, nil)
		_, err := a.Pool.Exec(context.Background(), `INSERT INTO flashsale_sku (sku, total, available) VALUES ('sku-lab-02', 5, 5)`)
		require.NoError(x, err)
		owner, other := a.Token(x, "user-0042", httpx.RoleUser), a.Token(x, "user-0043", httpx.RoleUser)
		const key = "fs03-shared-key"
		r := a.Do(x, holdReq(owner, labSKU, key))
		require.Equal(x, http.StatusCreated, r.Status, string(r.Body))
		var mine reserve.Reservation
		r.JSON(x, &mine)
		x.Step(lab.Step{Actor: "user-0042", Action: "hold with key " + key, Outcome: lab.Accepted, Note: fmt.Sprintf("reservation %d", mine.ID)})
		for _, c := range []struct {
			actor string
			req   lab.Req
		}{
			{"user-0043", holdReq(other, labSKU, key)},
			{"user-0043", holdReq(other, "sku-lab-02", key)},
			{"user-0042", holdReq(owner, "sku-lab-02", key)},
			{"user-0043", lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: other,
				Body: `{"sku":"sku-lab-01"}`, Headers: map[string]string{"Idempotency-Key": key}}},
		} {
			r := a.Do(x, c.req)
			x.Step(lab.Step{Actor: c.actor, Action: "hold with the same key", Outcome: lab.Refused, Note: fmt.Sprintf("%d %s", r.Status, r.Code())})
			require.Equal(x, http.StatusUnprocessableEntity, r.Status, string(r.Body))
			require.Equal(x, "request_key_reused", r.Code())
		}
		for _, req := range []lab.Req{
			holdReq(owner, labSKU, key),
			{Method: http.MethodPost, Path: "/flashsale/reservations", Token: owner, Body: `{"sku":"sku-lab-01"}`, Headers: map[string]string{"Idempotency-Key": key}},
			{Method: http.MethodPost, Path: "/flashsale/reservations", Token: owner, Body: `{"sku":"sku-lab-01"}`, Headers: map[string]string{"Idempotency-Key": `"` + key + `"`}},
		} {
			r := a.Do(x, req)
			require.Equal(x, http.StatusOK, r.Status, string(r.Body))
			var got reserve.Reservation
			r.JSON(x, &got)
			require.Equal(x, mine, got)
			x.Step(lab.Step{Actor: "user-0042", Action: "hold again with its key", Outcome: lab.Replayed, Note: fmt.Sprintf("reservation %d", got.ID)})
		}
		require.Equal(x, 1, a.Count(x, `SELECT count(*) FROM flashsale_reservation`))
		require.Equal(x, labUnits-1, available(x, a, labSKU))
		require.Equal(x, 5, available(x, a, "sku-lab-02"))
	},
}

// BoundedAdmission is FS-04: limit 8, wait line 16, 200 simultaneous
// buyers. Every admitted hold is held inside the database (a fault point
// before its commit) until the rest are seen: 8 in the database, 16
// waiting, and the other 176 already answered 503 + Retry-After without
// waiting for any database work. Then the holds go ahead: 24 HELD.
var BoundedAdmission = lab.Experiment{
	ID:         "reservations/bounded-admission",
	Test:       "TestFS04LimitEightLineSixteenTwoHundredAtOnceOverflowIs503AtOnce",
	Claim:      "limit 8, line 16, 200 buyers at once: 8 in the database, 16 waiting, 176 answered 503 at once; never more than 8 in the database",
	Overlap:    true,
	Invariants: []string{reserve.Module},
	NoNaive:    "the limit is configuration, not a guard in a query: unbounded admission is a slow database, which no invariant can report",
	Run: func(x *lab.X) {
		const limit, line, buyers = 8, 16, 200
		a := labSale(x, map[string]string{reserve.EnvLimit: fmt.Sprint(limit), reserve.EnvWaitLine: fmt.Sprint(line), reserve.EnvMaxWait: "0s"})
		proceed := make(chan struct{})
		a.Faults.ArmFunc(reserve.PointHoldBeforeCommit, func(ctx context.Context, _ string) error {
			select { // every hold waits here, its unit taken, until the experiment says go
			case <-proceed:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		type answer struct {
			i   int
			r   lab.Response
			err error
		}
		answers := make(chan answer, buyers)
		gate := make(chan struct{})
		var ready sync.WaitGroup
		for i := range buyers {
			ready.Add(1)
			tok := a.Token(x, fmt.Sprintf("user-%04d", i+1), httpx.RoleUser)
			go func() {
				ready.Done()
				<-gate
				r, err := a.Send(context.Background(), holdReq(tok, labSKU, fmt.Sprintf("fs04-%04d", i+1)))
				answers <- answer{i, r, err}
			}()
		}
		ready.Wait()
		close(gate)
		for range buyers - limit - line {
			ans := <-answers
			require.NoError(x, ans.err)
			x.Step(lab.Step{Actor: fmt.Sprintf("buyer-%03d", ans.i+1), Action: "hold", Outcome: lab.Refused,
				Note: fmt.Sprintf("%d %s, Retry-After %s", ans.r.Status, ans.r.Code(), ans.r.Header.Get("Retry-After"))})
			require.Equal(x, http.StatusServiceUnavailable, ans.r.Status, string(ans.r.Body))
			require.Equal(x, "overloaded", ans.r.Code())
			require.Equal(x, "1", ans.r.Header.Get("Retry-After"))
		}
		lab.WaitFor(x, 10*time.Second, "8 in the database and 16 in line", func() bool { return inUse(x, a) == limit && waiting(x, a) == line })
		x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("%d holds inside the database, %d waiting, %d answered 503", limit, line, buyers-limit-line)})
		select {
		case ans := <-answers:
			x.Fatalf("an answer beyond the overflow arrived while every hold was held: %d %s", ans.r.Status, ans.r.Body)
		default:
		}
		close(proceed)
		for range limit + line {
			ans := <-answers
			require.NoError(x, ans.err)
			x.Step(lab.Step{Actor: fmt.Sprintf("buyer-%03d", ans.i+1), Action: "hold", Outcome: lab.Accepted})
			require.Equal(x, http.StatusCreated, ans.r.Status, string(ans.r.Body))
		}
		peak := int(a.Gauge(x, "fencelab_flashsale_reservation_ops_in_db_peak"))
		x.Figure("held", limit+line)
		x.Figure("refused_at_once", buyers-limit-line)
		x.Figure("peak_in_db", peak)
		require.Equal(x, limit, peak, "never more than the limit in the database")
		require.Equal(x, 0, inUse(x, a))
		require.Equal(x, labUnits-limit-line, available(x, a, labSKU))
	},
}
