package flashsale_test

import (
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	reservations "github.com/fencelab/fencelab/lab/reservations"
)

// FS-01: 500 buyers, each its own HTTP client request in its own
// goroutine, released at once on 40 units. Every buyer keeps its request
// key and retries a 503 (after a short jittered pause: a crowd more
// impatient than Retry-After asks for) until it gets an answer that
// settles it. Exactly 40 are told 201 HELD, the other 460 409 sold_out;
// nothing else is ever answered; FS-R1..R3 hold.
func TestFS01FiveHundredBuyersFortyUnitsExactlyFortyHolds(t *testing.T) {
	e2etest.Experiment(t, reservations.FiveHundredBuyers)
}

// FS-02: a client disconnects in the middle of its hold and retries with
// the same key. Whether the server was before the commit (the hold rolls
// back) or after it (the hold stands and the retry returns it), the key
// ends up with exactly one reservation, and no permit is left behind. A
// client that leaves the wait line gives its place up too.
func TestFS02ClientLeavesMidHoldAndRetriesSameKeyOneReservation(t *testing.T) {
	e2etest.Experiment(t, reservations.ClientLeavesMidHold)
}

// FS-03: a request key belongs to the reservation it made. The same key
// from another user, or from the same user for another SKU, is a 422 and
// writes nothing.
func TestFS03SameKeyFromAnotherUserOrSKUIs422(t *testing.T) {
	e2etest.Experiment(t, reservations.KeyBelongsToItsReservation)
}

// FS-04: limit 8, wait line 16, 200 simultaneous buyers. Every admitted
// hold is held inside the database (a fault point before its commit)
// until the test has seen the rest: 8 are in the database, 16 wait, and
// the other 176 have already been answered 503 + Retry-After — without
// waiting for any database work. Then the holds go ahead: 24 HELD. The
// database concurrency, counted server-side around the hold itself, never
// passed 8.
func TestFS04LimitEightLineSixteenTwoHundredAtOnceOverflowIs503AtOnce(t *testing.T) {
	e2etest.Experiment(t, reservations.BoundedAdmission)
}

// FS-05: 40 holds expire (by SQL). Two release runs overlap — the
// periodic claim job, paused inside its first batch (its 10 rows released
// and locked, the SKU row updated, not committed), and the admin route,
// which skips the job's locked rows, releases others and then waits for
// the job's transaction on the SKU row — and a third runs after both:
// every unit comes back once. Then 40 more holds expire and three runs
// start at once: again 40 in total, each once (FS-R5).
func TestFS05ReleaseRunsTwiceConcurrentlyAndOnceMoreEachUnitReturnedOnce(t *testing.T) {
	e2etest.Experiment(t, reservations.ReleaseRacesItself)
}
