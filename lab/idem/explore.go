package idem

// The idempotency chapter under every schedule (fencelab lab explore
// idem/concurrent-same-key): two copies of one request with one key.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/require"
)

// sameKeyExplore: copies A and B of one debit with one key each look the
// key up (step "look") and then send (step "send"). Guarded, sending is
// the product's request, one step: the key's record decides, so one copy
// runs the effect and the other gets its response replayed, whatever each
// looked. Naive (check-then-insert on records without their primary
// key), a copy that found no record runs the debit and records the key:
// the schedules where both look before either sends record the key twice
// and debit twice (IDEM-I1).
var sameKeyExplore = &lab.Explore{
	Claim: "two copies of one request with one Idempotency-Key, each look → send: under every schedule one effect, the other copy gets the replayed response",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("look", "send")},
		{Name: "B", Steps: lab.Steps("look", "send")},
	},
	Run: exploreSameKey,
}

func exploreSameKey(x *lab.X) {
	const key = "k-explore-1"
	d := newIdemDemo(x)
	x.Step(lab.Step{Actor: "db", Action: "demo account user-0042 holds 1000"})
	if x.Naive {
		_, err := d.pool.Exec(context.Background(), `ALTER TABLE idem_request DROP CONSTRAINT idem_request_pkey`)
		require.NoError(x, err)
		x.Step(lab.Step{Actor: "db", Action: "drop idem_request's primary key (scope, subject, key): the naive schema"})
	}
	fp := sha256.Sum256([]byte(body30))
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		db := a.Pool(d.pool.Config().ConnString())
		a.Step("look")
		seen, err := lookKey(ctx, db, key)
		if err != nil {
			x.Error(a.Name, "look up key "+key, err)
			return
		}
		a.Say("look up key "+key, fmt.Sprintf("%d record(s)", seen), "")
		a.Step("send")
		if !x.Naive {
			r, err := d.send(ctx, key)
			switch {
			case err != nil:
				x.Error(a.Name, "debit 30, key "+key, err)
			case r.Status == http.StatusCreated && replayed(r):
				a.Say("debit 30, key "+key, lab.Replayed, "the first response, stored")
			case r.Status == http.StatusCreated:
				a.Say("debit 30, key "+key, lab.Accepted, "ran the effect")
			default:
				x.Errorf("%s: debit 30, key %s: status %d: %s", a.Name, key, r.Status, r.Body)
			}
			return
		}
		if seen > 0 {
			a.Say("debit 30, key "+key, "found", "the key is recorded: nothing to do")
			return
		}
		err = naiveDebitAndRecord(ctx, db, key, fp[:])
		if err != nil {
			x.Error(a.Name, "debit 30, record the key", err)
			return
		}
		a.Say("debit 30, record the key", lab.Accepted, "")
	})
	n, balance := d.effects(x, key)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: %d effect row(s) for the key, balance %d", n, balance)})
	x.Figure("effects", n)
	if !x.Naive {
		require.Equal(x, 1, n, "one effect for one key")
	}
}
