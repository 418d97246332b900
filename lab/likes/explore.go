package likes

// The like counters chapter under every schedule (fencelab lab explore
// likes/recompute-beside-increments): a like, the counter and a recompute.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/lab/labkit"
	"github.com/fencelab/fencelab/lab/require"
	"github.com/fencelab/fencelab/services/social/like"
)

// recomputeExplore: one item, liked by user-0099 (counted) and by
// user-0100 (committed, not yet applied: the counter's backlog). Actor
// "user" (user-0101) likes it; actor "counter" runs one batch of the
// counter; actor "admin" recounts the item (step "recount", up to the
// product's recounted point: counts and watermark written, not committed)
// and commits. Guarded, the recount holds the counter's batches off and
// records the snapshot it counted in, so the counter skips what the
// recount already included: after a final catch-up the count equals the
// facts in every schedule (LIKE-I3). Naive (a recount without the
// watermark), the counter applies again whatever the recount counted
// before the counter did — the backlog's like at least, whenever the
// recount commits first — and LIKE-I3 reports the doubled count; the
// orders where the counter applies every like before the recount are not
// caught.
var recomputeExplore = &lab.Explore{
	Claim: "a like, one counter batch and a recount of the item in every order, with a like in the counter's backlog: after catch-up the count equals the facts",
	Actors: []lab.ActorSpec{
		{Name: "user", Steps: lab.Steps("like")},
		{Name: "counter", Steps: lab.Steps("apply")},
		{Name: "admin", Steps: lab.Steps("recount", "commit")},
	},
	Run: exploreRecompute,
}

func exploreRecompute(x *lab.X) {
	ctx := context.Background()
	l := StartLab(x, lab.Options{})
	labkit.People(x, l.App, "user-0099", "user-0100", "user-0101")
	item := l.Items(x, 1)[0]
	likes, err := like.NewService(labenv.Deps(l.App), like.Config{})
	require.NoError(x, err)
	_, err = likes.Like(ctx, "user-0099", item)
	require.NoError(x, err)
	l.CatchUp(x)
	_, err = likes.Like(ctx, "user-0100", item)
	require.NoError(x, err)
	x.Step(lab.Step{Actor: "user-0100", Action: fmt.Sprintf("like item %d", item), Outcome: lab.Accepted, Note: "committed, not yet applied: the counter's backlog"})
	if x.Naive {
		x.Step(lab.Step{Actor: "db", Action: "the recount records no watermark", Note: "the naive recompute"})
	}
	// The product's recounted point is the boundary between a recount and
	// its commit: the counts and the watermark are written, the counter's
	// position is locked.
	x.StepAt(l.Faults, like.PointRecounted, "commit")
	x.Interleave(func(a *lab.Actor) {
		ctx := a.Context()
		d, db := labenv.ActorDeps(a, l.App)
		svc, err := like.NewService(d, like.Config{})
		require.NoError(x, err)
		switch a.Name {
		case "user":
			a.Step("like")
			f, err := svc.Like(ctx, "user-0101", item)
			if err != nil {
				x.Error(a.Name, "user-0101 likes the item", err)
				return
			}
			a.X.Step(lab.Step{Actor: a.Name, Action: fmt.Sprintf("user-0101 likes item %d", item), Outcome: lab.Accepted, Fence: f.Version})
		case "counter":
			r, err := outbox.NewRunner(db, svc.Counter(), outbox.Options{Owner: "counter", Faults: l.Faults})
			require.NoError(x, err)
			a.Step("apply")
			n, err := r.RunOnce(ctx)
			if err != nil {
				x.Error(a.Name, "apply a batch", err)
				return
			}
			// Give the lease back (Run on an ended context only releases
			// it), so the final catch-up can run.
			done, cancel := context.WithCancel(ctx)
			cancel()
			if err := r.Run(done); err != nil {
				x.Error(a.Name, "release the counter's lease", err)
				return
			}
			a.Say("apply a batch", lab.Accepted, fmt.Sprintf("%d event(s)", n))
		case "admin":
			a.Step("recount")
			if !x.Naive {
				rc, err := svc.Recompute(ctx, item)
				if err != nil {
					x.Error(a.Name, "recount the item", err)
					return
				}
				a.Say("recount the item", lab.Accepted, fmt.Sprintf("committed; %d event(s) counted ahead of the counter, %d corrected", rc.EventsAhead, rc.Drifted))
				return
			}
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				var n int64
				if err := tx.QueryRow(ctx, `UPDATE social_like_count c
				   SET n = (SELECT count(*) FROM social_like f WHERE f.item_id = c.item_id AND f.liked), counted_through = NULL
				 WHERE c.item_id = $1 RETURNING n`, item).Scan(&n); err != nil {
					return err
				}
				a.Say("recount the item without recording the watermark", "written", fmt.Sprintf("count %d", n))
				a.Step("commit")
				return nil
			})
			if err != nil {
				x.Error(a.Name, "recount the item", err)
				return
			}
			a.Say("commit", lab.Accepted, "")
		}
	})
	l.CatchUp(x)
	var n, facts int64
	require.NoError(x, l.Pool.QueryRow(ctx, `SELECT coalesce((SELECT n FROM social_like_count WHERE item_id = $1), 0),
	       (SELECT count(*) FROM social_like WHERE item_id = $1 AND liked)`, item).Scan(&n, &facts))
	x.Step(lab.Step{Actor: "db", Action: fmt.Sprintf("re-read: count %d, liked facts %d", n, facts)})
	x.Figure("count", n)
	if !x.Naive {
		require.Equal(x, facts, n, "after catch-up the count is the facts (LIKE-I3)")
	}
}
