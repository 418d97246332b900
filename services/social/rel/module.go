// Package rel is the social case study's first part (chapter 8): follow relations
// as authorization, without resurrection.
//
// The truth table social_relation holds one row per (follower, followee)
// with its state and a version that grows by one per change; each change
// writes one social.rel outbox event carrying the version, in the same
// transaction (REL-I1). Every operation on a pair locks both of the
// pair's rows in key order, so racing follows, unfollows, approvals and
// blocks serialise and a block ends follows both ways atomically (REL-I2).
//
// Reads that decide a permission go to the truth table: AccessCheck
// (social_can_read) for one post, social_readable_posts(viewer) as a FROM
// item for a whole page. Follower and following lists and counts are
// derived views kept by outbox consumers that apply an event only if its
// version is newer (REL-I3); their lag is declared in social_view,
// measured, and checked (REL-I4).
package rel

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/promx"
)

// Build makes rel's part of the social module: routes, the view
// consumers, metrics and the demo seed.
func Build(d app.Deps) (app.Runtime, error) {
	s, err := NewService(d)
	if err != nil {
		return app.Runtime{}, err
	}
	promx.Register(d.Registerer(), lagCollector(d.Pool, d.Log))
	m := app.Runtime{Seed: s.seed}
	for _, v := range Views {
		t, err := app.ConsumerTask(d, s.viewConsumer(v))
		if err != nil {
			return app.Runtime{}, err
		}
		m.Tasks = append(m.Tasks, t)
	}
	h := &handlers{svc: s}
	keys := d.Keys()
	m.Routes = func(e *echo.Echo) { routes(e, h, d.Auth, keys) }
	return m, nil
}

// Demo users `fencelab dev` seeds: user-0042 (public) follows user-0043
// (private, approved); user-0044's request to user-0043 is pending.
const (
	DemoPublic  = "user-0042"
	DemoPrivate = "user-0043"
	demoPending = "user-0044"
)

// seed is idempotent and restores only what is missing (see below).
func (s *Service) seed(ctx context.Context) error {
	// Only what is missing: a profile, a relation or the posts the reader
	// already has (changed or not) are theirs. A block or an unfollow the
	// reader made stays in place, and a second `dev` never fails on one.
	for _, u := range []struct {
		id      string
		private bool
	}{{DemoPublic, false}, {DemoPrivate, true}, {demoPending, false}} {
		if _, err := s.profile(ctx, u.id); err == nil {
			continue
		}
		if _, err := s.SetProfile(ctx, u.id, u.private); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		follower, followee string
		approve            bool
	}{{DemoPublic, DemoPrivate, true}, {demoPending, DemoPrivate, false}, {DemoPrivate, DemoPublic, false}} {
		r, _, err := s.Relations(ctx, f.follower, f.followee)
		if err != nil {
			return err
		}
		if r.Version == 0 { // never related: the seed's to write
			res, err := s.Do(ctx, OpFollow, f.follower, f.followee)
			if err != nil {
				return err
			}
			if f.approve && res.Relation.State == StatePending {
				if _, err := s.Do(ctx, OpApprove, f.followee, f.follower); err != nil {
					return err
				}
			}
		}
	}
	page, err := s.timelinePage(ctx, DemoPrivate, DemoPrivate, "", 1)
	if err != nil || len(page.Posts) > 0 {
		return err
	}
	for _, p := range []PostRequest{
		{Body: "Hello from user-0043 (public).", Visibility: Public},
		{Body: "For my approved followers only.", Visibility: Followers},
		{Body: "A note to self.", Visibility: Self},
	} {
		if _, err := s.CreatePost(ctx, DemoPrivate, p); err != nil {
			return err
		}
	}
	return nil
}
