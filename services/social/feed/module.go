// Package feed is the social case study's second part (chapter 9): the home feed
// by push, pull and hybrid, re-authorised on every read.
//
// Posts reach feeds through one outbox consumer (social.feed.fanout) that
// settles each new post — records its place in the keyset order, a settle
// seq, and whether it is pushed — and writes the inbox rows: to the
// author's active followers when a pushed post settles, and an author's
// pushed posts so far when a follow becomes active. Publishing stays one
// short transaction however many followers the author has; the fan-out's
// lag is declared in social_view and bounded by REL-I4.
//
// An inbox row is only a candidate. Every page is one statement that
// re-checks, for each post it returns, AccessCheck (social_readable_posts)
// and the follow on the truth table (FEED-I1), so unfollow, block and a
// post turned SELF take effect on the next read whatever the inbox holds.
// Pages are keyset on (created_at, post_id) with an HMAC-signed cursor
// that also carries the settle watermark: a post whose transaction
// committed late is served as a late arrival on the next page instead of
// being skipped (FEED-03).
package feed

import (
	"context"
	"fmt"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
)

// Build makes feed's part of the social module: the route, the fan-out
// consumer, the response log's pruning and the metrics.
func Build(d app.Deps) (app.Runtime, error) {
	cfg, err := LoadConfig(d.Config)
	if err != nil {
		return app.Runtime{}, err
	}
	if d.Config.TokenSecret == "" {
		return app.Runtime{}, fmt.Errorf("social/feed: the token secret is empty: cursors would be unsigned")
	}
	s, err := NewService(d, cfg)
	if err != nil {
		return app.Runtime{}, err
	}
	m := app.Runtime{}
	t, err := app.ConsumerTask(d, s.Consumer())
	if err != nil {
		return app.Runtime{}, err
	}
	m.Tasks = append(m.Tasks, t)
	m.Kinds = append(m.Kinds, s.purgeKind())
	if cfg.ResponseLog {
		m.Tasks = append(m.Tasks, app.Task{Name: "feed-response-log-prune", Run: s.pruneEvery(10 * time.Second)})
	}
	h := &handlers{svc: s}
	m.Routes = func(e *echo.Echo) { routes(e, h, d.Auth) }
	return m, nil
}

func (s *Service) pruneEvery(interval time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				if _, err := s.pruneServed(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("feed: prune the response log", "err", err)
				}
			}
		}
	}
}
