package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/social/rel"
)

// loadBatch is how many rows one unnest statement carries.
const loadBatch = 5000

// loadStats is what Load or Rebuild wrote.
type loadStats struct {
	Users, Relations, Posts         int
	Settled, Pushed, Inbox, PullSet int64
	Truth, Derived, Views, Analyzed time.Duration
}

// errAlreadyLoaded: the graph's users exist in the database.
var errAlreadyLoaded = errors.New("feed: the graph's users already exist")

// fanoutConsumer is the consumer's identity (Register and LockPosition
// need no handler).
var fanoutConsumer = outbox.Consumer{Name: ConsumerName, Topics: []string{rel.PostTopic, rel.Topic}}

// Load writes g into the database in one transaction: the truth as rel
// would have written it — users, relation rows with one social.rel event
// per version (REL-I1), posts with their social.post creation events —
// and the feed's derived state as the fan-out consumer would have built
// it under strategy st (settled posts, inboxes, the pull set). It holds
// the fan-out consumer's row meanwhile (outbox.LockPosition: settle seqs
// stay ordered with every batch) and records the loaded events in the
// consumer's inbox, applied in the transaction that applied them, so the
// consumer skips them instead of fanning everything out again. rel's
// follower views are then rebuilt from the truth (their consumers apply
// the loaded events as no-ops), and the tables analysed.
func Load(ctx context.Context, pool *pgxpool.Pool, g *Graph, st Strategy) (loadStats, error) {
	var stats loadStats
	start := time.Now()
	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := lockFanout(ctx, tx); err != nil {
			return err
		}
		if err := loadTruth(ctx, tx, g, &stats); err != nil {
			return err
		}
		stats.Truth = time.Since(start)
		if err := build(ctx, tx, st, &stats); err != nil {
			return err
		}
		if _, err := outbox.MarkApplied(ctx, tx, fanoutConsumer); err != nil {
			return fmt.Errorf("feed: load: %w", err)
		}
		stats.Derived = time.Since(start) - stats.Truth
		return nil
	})
	if err != nil {
		return stats, err
	}
	mark := time.Now()
	for _, v := range rel.Views {
		if err := v.Rebuild(ctx, pool); err != nil {
			return stats, err
		}
	}
	stats.Views = time.Since(mark)
	mark = time.Now()
	err = analyze(ctx, pool)
	stats.Analyzed = time.Since(mark)
	return stats, err
}

// Rebuild replaces the feed's derived state with the one strategy st
// builds from the truth: every post settled again (new seqs: a scroll in
// progress sees the posts of its range once more, as late arrivals), the
// pull set, every inbox. It is the repair for a lost inbox and how the
// benchmark gives each strategy the same graph. The fan-out consumer is
// held off while it runs and goes on from its position afterwards.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, st Strategy) (loadStats, error) {
	var stats loadStats
	start := time.Now()
	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := lockFanout(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlResetFeed); err != nil {
			return fmt.Errorf("feed: rebuild: reset: %w", pg.MapError(err))
		}
		return build(ctx, tx, st, &stats)
	})
	stats.Derived = time.Since(start)
	if err != nil {
		return stats, err
	}
	mark := time.Now()
	err = analyze(ctx, pool)
	stats.Analyzed = time.Since(mark)
	return stats, err
}

func lockFanout(ctx context.Context, tx pgx.Tx) error {
	if err := outbox.Register(ctx, tx, fanoutConsumer); err != nil {
		return err
	}
	_, err := outbox.LockPosition(ctx, tx, ConsumerName)
	return err
}

// build settles every unsettled post with st's decision, fills the pull
// set and writes every pushed post into every active follower's inbox.
func build(ctx context.Context, tx pgx.Tx, st Strategy, stats *loadStats) error {
	var below *int64
	if t := st.pushesBelow(); t != always {
		below = &t
	}
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"settle posts", sqlSettleAll, []any{below}},
		{"pull set", sqlPullAuthorsAll, nil},
		{"inboxes", sqlFanOutAll, nil},
	}
	for _, s := range steps {
		if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("feed: build %s: %w", s.what, pg.MapError(err))
		}
	}
	if err := tx.QueryRow(ctx, sqlFeedCounts).Scan(&stats.Settled, &stats.Pushed, &stats.Inbox, &stats.PullSet); err != nil {
		return fmt.Errorf("feed: build: count: %w", pg.MapError(err))
	}
	return nil
}

func analyze(ctx context.Context, pool *pgxpool.Pool) error {
	// Bulk loads leave the planner's statistics describing empty tables;
	// the feed's plans (inbox scans, laterals per followee) depend on them.
	_, err := pool.Exec(ctx, `ANALYZE social_user, social_relation, social_post, social_feed_post, social_feed_inbox, social_feed_pull_author`)
	if err != nil {
		return fmt.Errorf("feed: analyze: %w", pg.MapError(err))
	}
	return nil
}

// loadTruth writes users, relations and posts with their events, through
// rel's load functions: the truth table has one writer.
func loadTruth(ctx context.Context, tx pgx.Tx, g *Graph, stats *loadStats) error {
	ids := make([]string, len(g.Users))
	private := make([]bool, len(g.Users))
	for i, u := range g.Users {
		ids[i], private[i] = u.ID, u.Private
	}
	taken, found, err := rel.AnyUserExists(ctx, tx, ids)
	if err != nil {
		return fmt.Errorf("feed: load: %w", err)
	}
	if found {
		return fmt.Errorf("%w (%s): load into a fresh database or choose another prefix", errAlreadyLoaded, taken)
	}
	born := g.Config.Start
	for lo := 0; lo < len(ids); lo += loadBatch {
		hi := min(lo+loadBatch, len(ids))
		if err := rel.LoadUsers(ctx, tx, ids[lo:hi], private[lo:hi], born); err != nil {
			return fmt.Errorf("feed: %w", err)
		}
	}
	stats.Users = len(ids)

	// One event per version of each row, in version order; a pair's
	// versions never straddle two calls.
	var batch []rel.LoadRelation
	add := func(a, b int, s rel.State, v int64, o rel.Op) {
		batch = append(batch, rel.LoadRelation{Follower: g.Users[a].ID, Followee: g.Users[b].ID, State: s, Version: v, Op: o})
	}
	flush := func() error {
		if err := rel.LoadRelations(ctx, tx, batch, born); err != nil {
			return fmt.Errorf("feed: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	for _, fl := range g.Follows {
		switch {
		case !g.Users[fl.Followee].Private:
			add(fl.Follower, fl.Followee, rel.StateActive, 1, rel.OpFollow)
		case fl.Pending:
			add(fl.Follower, fl.Followee, rel.StatePending, 1, rel.OpFollow)
		default:
			add(fl.Follower, fl.Followee, rel.StatePending, 1, rel.OpFollow)
			add(fl.Follower, fl.Followee, rel.StateActive, 2, rel.OpApprove)
		}
		if len(batch) >= loadBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	for _, b := range g.Blocks {
		add(b.Blocker, b.Blocked, rel.StateBlocked, 1, rel.OpBlock)
	}
	if err := flush(); err != nil {
		return err
	}
	stats.Relations = len(g.Follows) + len(g.Blocks)

	posts := make([]rel.LoadPost, 0, loadBatch)
	for i, p := range g.Posts {
		posts = append(posts, rel.LoadPost{Author: g.Users[p.Author].ID, Visibility: p.Visibility,
			Body: fmt.Sprintf("Post %d of the generated graph (seed %d).", i+1, g.Config.Seed), CreatedAt: p.CreatedAt})
		if len(posts) == loadBatch || i == len(g.Posts)-1 {
			if err := rel.LoadPosts(ctx, tx, posts); err != nil {
				return fmt.Errorf("feed: %w", err)
			}
			posts = posts[:0]
		}
	}
	stats.Posts = len(g.Posts)
	return nil
}
