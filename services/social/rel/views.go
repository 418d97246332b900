package rel

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelab/fencelab/core/outbox"
	"github.com/fencelab/fencelab/core/pg"
)

// View is one derived view of the social.rel stream: a table of (user_id,
// peer_id, active, version) rows and a count table, kept by its own outbox
// consumer. Views may lag the truth table; they never decide a permission
// (REL-I4), and they apply an event only if its version is newer (REL-I3).
type View struct {
	Name         string // social_view.name
	ConsumerName string // its outbox consumer (social_view.consumer)
	Table        string // rows: peer_id follows user_id, or user_id follows peer_id
	CountTable   string // active rows per user_id
	// row maps an event to the view's (user_id, peer_id); userCol and
	// peerCol name the truth table's columns they come from.
	row              func(RelEvent) (user, peer string)
	userCol, peerCol string

	applySQL, pageSQL, rebuildSQL, clearSQL, recountSQL string
}

var (
	// FollowersView: user_id's followers are the active peer_ids.
	FollowersView = newView("followers", "social.followers", "social_followers", "social_follower_count",
		"followee", "follower", func(e RelEvent) (string, string) { return e.Followee, e.Follower })
	// FollowingView: user_id follows the active peer_ids.
	FollowingView = newView("following", "social.following", "social_following", "social_following_count",
		"follower", "followee", func(e RelEvent) (string, string) { return e.Follower, e.Followee })

	// Views are the views rel maintains (social_view lists them with
	// their declared lag).
	Views = []*View{FollowersView, FollowingView}
)

func newView(name, consumer, table, counts, userCol, peerCol string, row func(RelEvent) (string, string)) *View {
	return &View{Name: name, ConsumerName: consumer, Table: table, CountTable: counts,
		row: row, userCol: userCol, peerCol: peerCol,
		applySQL:   fmt.Sprintf(sqlApplyView, table, counts),
		pageSQL:    fmt.Sprintf(sqlViewPage, table),
		rebuildSQL: fmt.Sprintf(sqlRebuildView, table, counts, userCol, peerCol),
		clearSQL:   fmt.Sprintf(sqlClearCounts, table, counts),
		recountSQL: fmt.Sprintf(sqlRecount, table, counts)}
}

// Consumer is the outbox consumer that maintains the view (Apply).
func (v *View) Consumer() outbox.Consumer {
	return outbox.Consumer{Name: v.ConsumerName, Topics: []string{Topic}, HandleBatch: v.Apply}
}

// viewConsumer is v's consumer as the process runs it: Consumer, with
// each applied event's delay since its change observed on s's metrics.
func (s *Service) viewConsumer(v *View) outbox.Consumer {
	c := v.Consumer()
	c.HandleBatch = func(ctx context.Context, tx pgx.Tx, evs []outbox.Event) error {
		if err := v.Apply(ctx, tx, evs); err != nil {
			return err
		}
		now := time.Now()
		for _, ev := range evs {
			s.m.applyDelay.WithLabelValues(v.Name).Observe(max(now.Sub(ev.Created), 0).Seconds())
		}
		return nil
	}
	return c
}

type pairKey struct{ user, peer string }

// Apply applies social.rel events to the view in tx, in any order and any
// number of times: within the batch only each pair's newest version
// counts, and the statement keeps a row's version unless the event's is
// greater (REL-I3). It is the consumer's batch handler; experiments call
// it directly to deliver a shuffled, duplicated stream (REL-02). Calls for
// one view must not run concurrently (the consumer's lease sees to that).
func (v *View) Apply(ctx context.Context, tx pgx.Tx, evs []outbox.Event) error {
	newest := make(map[pairKey]RelEvent, len(evs))
	for _, ev := range evs {
		var e RelEvent
		if err := json.Unmarshal(ev.Payload, &e); err != nil || e.Version < 1 || e.Follower == "" || e.Followee == "" {
			// A malformed relation event is a bug upstream; stopping here
			// makes the view's lag grow visibly instead of hiding a gap.
			return fmt.Errorf("social: view %s: malformed event %d: %s", v.Name, ev.ID, ev.Payload)
		}
		user, peer := v.row(e)
		k := pairKey{user, peer}
		if old, ok := newest[k]; !ok || e.Version > old.Version {
			newest[k] = e
		}
	}
	users, peers := make([]string, 0, len(newest)), make([]string, 0, len(newest))
	versions, active := make([]int64, 0, len(newest)), make([]bool, 0, len(newest))
	for k, e := range newest {
		users, peers = append(users, k.user), append(peers, k.peer)
		versions, active = append(versions, e.Version), append(active, e.State == StateActive)
	}
	if _, err := tx.Exec(ctx, v.applySQL, users, peers, versions, active); err != nil {
		return fmt.Errorf("social: view %s: apply %d events: %w", v.Name, len(evs), pg.MapError(err))
	}
	return nil
}

// Rebuild recomputes the view from the truth table in one transaction:
// the way to restore a view that lost its rows (or whose events the
// outbox has purged). Replaying the stream into an emptied view would
// show every ended follow for a moment, between its old "active" event
// and its "none"; the rebuild never shows one. It holds the consumer's
// batches off while it runs (outbox.LockPosition), writes the truth's
// rows through the version gate and recounts; the consumer then goes on
// from its position, and events the rebuild already covered are refused
// as not newer (REL-I3).
func (v *View) Rebuild(ctx context.Context, pool *pgxpool.Pool) error {
	if err := outbox.Register(ctx, pool, v.Consumer()); err != nil {
		return err
	}
	return pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := outbox.LockPosition(ctx, tx, v.ConsumerName); err != nil {
			return err
		}
		for _, sql := range []string{v.rebuildSQL, v.clearSQL, v.recountSQL} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("social: rebuild view %s: %w", v.Name, pg.MapError(err))
			}
		}
		return nil
	})
}

// followersPage lists owner's followers from the followers view, if viewer may
// see owner's lists (social_can_see_lists), with the view's lag.
func (s *Service) followersPage(ctx context.Context, viewer, owner, after string, limit int) (Page, error) {
	return s.list(ctx, FollowersView, viewer, owner, after, limit)
}

// followingPage lists whom owner follows, from the following view.
func (s *Service) followingPage(ctx context.Context, viewer, owner, after string, limit int) (Page, error) {
	return s.list(ctx, FollowingView, viewer, owner, after, limit)
}

func (s *Service) list(ctx context.Context, v *View, viewer, owner, after string, limit int) (Page, error) {
	limit, err := checkLimit(limit)
	if err != nil {
		return Page{}, err
	}
	if err := checkAfter(after); err != nil {
		return Page{}, err
	}
	if err := s.mayList(ctx, viewer, owner); err != nil {
		return Page{}, err
	}
	ids, err := userIDs(ctx, s.pool, v.pageSQL, owner, after, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("social: %s of %s: %w", v.Name, owner, err)
	}
	p := pageOf(ids, limit)
	lags, err := s.viewLags(ctx)
	if err != nil {
		return Page{}, err
	}
	for i := range lags {
		if lags[i].View == v.Name {
			p.Lag = &lags[i]
		}
	}
	return p, nil
}

// mayList decides on the truth table whether viewer may see owner's lists.
func (s *Service) mayList(ctx context.Context, viewer, owner string) error {
	if err := validUser(owner); err != nil {
		return err
	}
	var exists, ok bool
	if err := s.pool.QueryRow(ctx, sqlCanSeeLists, viewer, owner).Scan(&exists, &ok); err != nil {
		return fmt.Errorf("social: lists of %s: %w", owner, pg.MapError(err))
	}
	if !exists {
		return errUserNotFound
	}
	if !ok {
		return ErrForbidden
	}
	return nil
}

// countsOf returns owner's follower and following counts from the views,
// with the events about owner each view has not applied yet.
func (s *Service) countsOf(ctx context.Context, viewer, owner string) (Counts, error) {
	if err := s.mayList(ctx, viewer, owner); err != nil {
		return Counts{}, err
	}
	c := Counts{UserID: owner, Pending: map[string]int64{}}
	if err := s.pool.QueryRow(ctx, sqlCounts, owner).Scan(&c.Followers, &c.Following); err != nil {
		return Counts{}, fmt.Errorf("social: counts of %s: %w", owner, pg.MapError(err))
	}
	rows, err := s.pool.Query(ctx, sqlPendingForUser, owner)
	if err != nil {
		return Counts{}, fmt.Errorf("social: pending events of %s: %w", owner, pg.MapError(err))
	}
	var (
		name string
		n    int64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { c.Pending[name] = n; return nil })
	if err != nil {
		return Counts{}, fmt.Errorf("social: pending events of %s: %w", owner, pg.MapError(err))
	}
	return c, nil
}

// viewLags measures every declared view (social_view): its consumer's
// unapplied events, the oldest one's age and the declared bound.
func (s *Service) viewLags(ctx context.Context) ([]Lag, error) {
	return viewLags(ctx, s.pool)
}

// viewLags is Service.ViewLags on any querier (the metrics collector).
func viewLags(ctx context.Context, q pg.Querier) ([]Lag, error) {
	rows, err := q.Query(ctx, sqlViewLag)
	if err != nil {
		return nil, fmt.Errorf("social: view lag: %w", pg.MapError(err))
	}
	lags, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lag, error) {
		var l Lag
		err := r.Scan(&l.View, &l.Consumer, &l.MaxLagSeconds, &l.Events, &l.Seconds)
		l.Within = l.Seconds <= l.MaxLagSeconds
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("social: view lag: %w", pg.MapError(err))
	}
	return lags, nil
}
