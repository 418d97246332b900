package reserve

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
)

// Experiments are the reservations chapter's runnable claims.
var Experiments = []lab.Experiment{FiveHundredBuyers, ReleaseRacesItself}

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
// the reservation. Sixty buyers all read 40 before anyone writes: sixty
// holds on forty units, and FS-R1 reports the oversold SKU.
var FiveHundredBuyers = lab.Experiment{
	ID:         "reservations/five-hundred-buyers",
	Test:       "TestFS01FiveHundredBuyersFortyUnitsExactlyFortyHolds",
	Claim:      "500 buyers released at once on 40 units: exactly 40 holds, 460 sold_out, no oversell, admission bounded",
	Invariants: []string{Module},
	Naive:      "check-then-insert: read available, decide in Go, write available = read − 1 and insert the hold",
	Catches:    []string{"FS-R1"},
	Run:        runFiveHundredBuyers,
}

func runFiveHundredBuyers(x *lab.X) {
	a := x.Start(lab.Options{})
	_, err := NewInventory(InventoryOptions{}).CreateSKU(context.Background(), a.Pool, labSKU, labUnits)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "admin", Action: fmt.Sprintf("put %d units of %s on sale", labUnits, labSKU), Outcome: lab.Accepted})
	if x.Naive {
		naiveHolds(x, a, 60)
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
	gate := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range buyers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			actor := fmt.Sprintf("buyer-%03d", i+1)
			tok := a.Token(x, fmt.Sprintf("user-%04d", i+1), httpx.RoleUser)
			key := fmt.Sprintf("fs01-%04d", i+1)
			ready.Done()
			<-gate
			for {
				r, err := a.Send(context.Background(), lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations",
					Token: tok, Body: ReserveRequest{SKU: labSKU, RequestKey: key}})
				if err == nil && r.Status == http.StatusServiceUnavailable && r.Code() == "overloaded" && r.Header.Get("Retry-After") != "" {
					out[i].overload++
					time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // a crowd more impatient than Retry-After
					continue
				}
				out[i].status, out[i].code, out[i].err = r.Status, r.Code(), err
				step := lab.Step{Actor: actor, Action: "hold 1 unit", Note: fmt.Sprintf("after %d × 503 overloaded", out[i].overload)}
				switch {
				case err != nil:
					step.Outcome, step.Note = "transport error", err.Error()
				case r.Status == http.StatusCreated:
					var res Reservation
					r.JSON(x, &res)
					step.Outcome, step.Note = "held", fmt.Sprintf("reservation %d, %s", res.ID, step.Note)
				default:
					step.Outcome = r.Code()
				}
				x.Step(step)
				return
			}
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()

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
	require.LessOrEqual(x, peak, DefaultConfig().Limit)
}

// naiveHolds is check-then-insert, done by the experiment to the scratch
// database: the product's hold is one guarded statement (FS-R1).
func naiveHolds(x *lab.X, a *lab.App, buyers int) {
	ctx := context.Background()
	var wg, read sync.WaitGroup
	read.Add(buyers)
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actor := fmt.Sprintf("buyer-%03d", i+1)
			var available int
			err := a.Pool.QueryRow(ctx, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU).Scan(&available)
			read.Done()
			read.Wait() // everyone has looked before anyone writes
			if err != nil || available < 1 {
				x.Step(lab.Step{Actor: actor, Action: fmt.Sprintf("read available %d", available), Outcome: "sold_out"})
				return
			}
			tx, err := a.Pool.Begin(ctx)
			if err != nil {
				x.Errorf("%s: %v", actor, err)
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
			var id int64
			_, err = tx.Exec(ctx, `UPDATE flashsale_sku SET available = $2 WHERE sku = $1`, labSKU, available-1)
			if err == nil {
				err = tx.QueryRow(ctx, `INSERT INTO flashsale_reservation (sku, user_id, request_key, state, expires_at)
				                        VALUES ($1, $2, $3, 'HELD', now() + interval '5 minutes') RETURNING id`,
					labSKU, fmt.Sprintf("user-%04d", i+1), fmt.Sprintf("naive-%04d", i+1)).Scan(&id)
			}
			if err == nil {
				_, err = tx.Exec(ctx, `INSERT INTO flashsale_stock_move (sku, reservation_id, reason, delta) VALUES ($1, $2, 'hold', -1)`, labSKU, id)
			}
			if err == nil {
				err = tx.Commit(ctx)
			}
			step := lab.Step{Actor: actor, Action: fmt.Sprintf("read available %d, write %d, insert hold", available, available-1),
				Outcome: lab.Violates, Note: fmt.Sprintf("reservation %d", id)}
			if err != nil {
				step.Outcome, step.Note = "error", err.Error()
			}
			x.Step(step)
		}()
	}
	wg.Wait()
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d HELD on %d units, available %d",
		a.Count(x, `SELECT count(*) FROM flashsale_reservation WHERE state = 'HELD'`), labUnits,
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU))})
}

// ReleaseRacesItself is FS-05: the expiry release runs twice at once (the
// periodic job, paused inside its transaction after its first batch, and
// an admin run that skips the job's locked rows, then waits for its
// transaction on the SKU row), and once more after both; then three runs
// start together. Every expired unit comes back exactly once.
//
// The naive release reads the expired holds, then marks them released and
// adds their count to `available` — no state condition, no log, no CHECK.
// Two runs that read the same 40 holds give back 80 units; FS-R5 reports
// the stock that disagrees with its log.
var ReleaseRacesItself = lab.Experiment{
	ID:         "reservations/release-races-itself",
	Test:       "TestFS05ReleaseRunsTwiceConcurrentlyAndOnceMoreEachUnitReturnedOnce",
	Claim:      "the expiry release racing itself (job, admin, rerun; then three at once) returns each expired unit exactly once",
	Invariants: []string{Module},
	Naive:      "read the expired holds, then mark them released and add their count to available — no state condition, no log",
	Catches:    []string{"FS-R5"},
	Run:        runReleaseRacesItself,
}

func runReleaseRacesItself(x *lab.X) {
	ctx := context.Background()
	a := x.Start(lab.Options{Settings: map[string]string{EnvReleaseBatch: "10"}})
	_, err := NewInventory(InventoryOptions{}).CreateSKU(ctx, a.Pool, labSKU, labUnits)
	require.NoError(x, err)
	admin := a.Token(x, "admin-0001", httpx.RoleAdmin)
	holdAll := func(round int) {
		for i := range labUnits {
			tok := a.Token(x, fmt.Sprintf("user-%04d", round*100+i+1), httpx.RoleUser)
			r := a.Do(x, lab.Req{Method: http.MethodPost, Path: "/flashsale/reservations", Token: tok,
				Body: ReserveRequest{SKU: labSKU, RequestKey: fmt.Sprintf("fs05-%d-%02d", round, i+1)}})
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
		_, _, err := a.Jobs.Enqueue(ctx, a.Pool, claim.NewJob{Kind: ReleaseKind, BusinessKey: slot})
		require.NoError(x, err)
		jobs, err := a.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{ReleaseKind}})
		require.NoError(x, err)
		require.Len(x, jobs, 1)
		x.Step(lab.Step{Actor: actor, Action: "claim " + ReleaseKind + " job", Outcome: lab.Accepted, Fence: jobs[0].Fence})
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
	gate := a.Faults.Pause(PointReleaseBeforeCommit, labSKU)
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
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, run := range []func() int{
		func() int { return releaseByAdmin("admin-1") },
		func() int { return releaseByAdmin("admin-2") },
		func() int { return releaseByJob("worker", "fs05-b") },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results <- run()
		}()
	}
	close(start)
	wg.Wait()
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
	                           DROP TRIGGER flashsale_reservation_guard ON flashsale_reservation`)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: "the naive schema: no CHECK on available, no transition guard", Outcome: lab.Violates})
	var wg, read sync.WaitGroup
	read.Add(2)
	for _, actor := range []string{"worker", "admin"} {
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
				_, err = a.Pool.Exec(ctx, `UPDATE flashsale_sku SET available = available + $2 WHERE sku = $1`, labSKU, len(ids))
			}
			step := lab.Step{Actor: actor, Action: fmt.Sprintf("read %d expired holds, give their units back", len(ids)), Outcome: lab.Violates}
			if err != nil {
				step.Outcome, step.Note = "error", err.Error()
			}
			x.Step(step)
		}()
	}
	wg.Wait()
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: available %d of %d units",
		a.Count(x, `SELECT available FROM flashsale_sku WHERE sku = $1`, labSKU), labUnits)})
}
