// Package like is the social case study's third part (chapter 10): like counters
// that stay right through repeated clicks, like/unlike interleaving,
// duplicated delivery, a consumer killed between commit and
// acknowledgement, and a recompute racing online increments.
//
// The truth is social_like, one row per (item, user) with liked and a
// version that grows by one per change; every change appends one
// social.like event in its transaction (LIKE-I1, LIKE-I2). The count per
// item is derived: the counter consumer adds +1 or -1 per event in the
// transaction that also writes the outbox inbox row and the position, so
// each event is applied exactly once, whatever is redelivered and
// whichever process dies (LIKE-I3). A recompute records the snapshot it
// counted in; the counter skips the events it saw. What the count does
// not include yet is a SQL function of the outbox position and that
// snapshot, served with every count as its error bound (LIKE-I4).
//
// Items are posts (rel's social_post): liking needs AccessCheck.
package like

import (
	"context"
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Build makes like's part of the social module: routes, the counter
// consumer (a task in serve and worker), metrics, the demo seed.
var Build = app.BuildService(LoadConfig, NewService, runtime)

func runtime(d app.Deps, _ Config, s *Service) (app.Runtime, error) {
	task, err := app.ConsumerTask(d, s.Counter())
	if err != nil {
		return app.Runtime{}, err
	}
	h := &handlers{svc: s}
	return app.Runtime{
		Tasks:  []app.Task{task},
		Routes: func(e *echo.Echo) { routes(e, h, d.Auth) },
		Seed:   s.seed,
	}, nil
}

// seed: user-0042 likes user-0043's first public post (rel seeds it
// first). Idempotent: a repeated like changes nothing.
func (s *Service) seed(ctx context.Context) error {
	var item int64
	err := s.pool.QueryRow(ctx, sqlDemoItem, rel.DemoPrivate).Scan(&item)
	if errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("social/like: seed: %w", pg.MapError(err))
	}
	// A fact the reader has (liked or unliked since) is theirs to keep.
	var liked bool
	var version int64
	var at any
	err = s.pool.QueryRow(ctx, sqlFact, item, rel.DemoPublic).Scan(&liked, &version, &at)
	if err == nil {
		return nil
	}
	if !errors.Is(pg.MapError(err), pg.ErrNotFound) {
		return fmt.Errorf("social/like: seed: %w", pg.MapError(err))
	}
	_, err = s.Like(ctx, rel.DemoPublic, item)
	return err
}
