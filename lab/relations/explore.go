package relations

// The relations chapter under every schedule (fencelab lab explore
// relations/block-revokes-on-commit): a follow and a block of one pair.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/rel"
)

// followBlockExplore: user-a (actor A) looks whether user-b blocks it
// (step "look"), follows user-b (step "follow", up to the product's
// before_commit point) and commits; user-b (actor B) blocks user-a (step
// "block", up to before_commit) and commits. Guarded, both are the
// product's operation: each locks the pair's two rows and decides under
// the lock, so a follow queued behind an uncommitted block finds it and is
// refused, and a block after a follow ends it in the same commit — REL-I2
// holds in every schedule. Naive, the follow trusts its look: a follow
// whose look came before the block committed writes "active" inside the
// blocked pair, and REL-I2 reports it; the serial orders are not caught.
var followBlockExplore = &lab.Explore{
	Claim: "user-a follows user-b while user-b blocks user-a, each up to its commit: under every schedule the pair ends blocked with no follow inside it",
	Actors: []lab.ActorSpec{
		{Name: "A", Steps: lab.Steps("look", "follow", "commit")},
		{Name: "B", Steps: lab.Steps("block", "commit")},
	},
	Run: exploreFollowBlock,
}

func exploreFollowBlock(x *lab.X) {
	ctx := context.Background()
	e := StartLab(x, lab.Options{})
	e.Users(x, "user-a", "user-b")
	// An unfollow that changes nothing creates the pair's two rows (state
	// none, version 0): the naive follow below updates an existing row.
	_, err := e.Svc.Do(ctx, rel.OpUnfollow, "user-a", "user-b")
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "admin", Action: "user-a and user-b exist, public, no relation"})
	if x.Naive {
		x.Step(lab.Step{Actor: "db", Action: "user-a's follow is decided on its look, outside the pair's lock", Note: "the naive follow"})
	}
	// The product's before_commit point is the boundary between an
	// operation and its commit: the pair's rows are locked and written.
	x.StepAt(e.Faults, rel.PointBeforeCommit, "commit")
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		d, db := labenv.ActorDeps(a, e.App)
		svc, err := rel.NewService(d)
		require.NoError(x, err)
		if a.Name == "B" {
			a.Step("block")
			r, err := svc.Do(ctx, rel.OpBlock, "user-b", "user-a")
			if err != nil {
				x.Error(a.Name, "block user-a", err)
				return
			}
			a.Say("block user-a", lab.Accepted, fmt.Sprintf("committed, version %d", r.Version))
			return
		}
		a.Step("look")
		var state string
		if err := db.QueryRow(ctx, `SELECT state FROM social_relation WHERE follower = 'user-b' AND followee = 'user-a'`).Scan(&state); err != nil {
			x.Error(a.Name, "look user-b > user-a up", err)
			return
		}
		a.Say("look user-b > user-a up", state, "")
		a.Step("follow")
		if !x.Naive {
			r, err := svc.Do(ctx, rel.OpFollow, "user-a", "user-b")
			switch {
			case errors.Is(err, rel.ErrBlocked):
				a.Say("follow user-b", lab.Refused, "403 blocked: decided under the pair's lock")
			case err != nil:
				x.Error(a.Name, "follow user-b", err)
			default:
				a.Say("follow user-b", lab.Accepted, fmt.Sprintf("%s, committed, version %d", r.State, r.Version))
			}
			return
		}
		if state == string(rel.StateBlocked) {
			a.Say("follow user-b", lab.Refused, "its look found the block")
			return
		}
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var version int64
			if err := tx.QueryRow(ctx, `SELECT version FROM social_relation WHERE follower = 'user-a' AND followee = 'user-b'`).Scan(&version); err != nil {
				return err
			}
			id, err := outbox.Append(ctx, tx, rel.Topic, "user-b", rel.RelEvent{
				Follower: "user-a", Followee: "user-b", State: rel.StateActive, Version: version + 1, Op: rel.OpFollow,
			})
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
UPDATE social_relation SET state = 'active', version = $1, event_id = $2, changed_tx = pg_current_xact_id(), updated_at = now()
 WHERE follower = 'user-a' AND followee = 'user-b'`, version+1, id); err != nil {
				return err
			}
			a.Say("follow user-b", "written", "active, on its look alone")
			a.Step("commit")
			return nil
		})
		if err != nil {
			x.Error(a.Name, "follow user-b", err)
			return
		}
		a.Say("commit", lab.Accepted, "")
	})
	ab, ba, err := e.Svc.Relations(ctx, "user-a", "user-b")
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: user-a > user-b %s, user-b > user-a %s", ab.State, ba.State)})
	if !x.Naive {
		require.Equal(x, rel.StateBlocked, ba.State, "the block commits in every schedule")
		require.Equal(x, rel.StateNone, ab.State, "no follow inside a blocked pair (REL-I2)")
	}
}
