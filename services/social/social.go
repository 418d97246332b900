// Package social is the social case study (spec 40): relations (rel),
// the home feed and like counters, one module on one truth table. rel is
// built first; feed and like receive its *rel.Service (the book's
// RelationService and AccessCheck) and add their parts here.
package social

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/like"
	"github.com/fencelab/fencelab/services/social/rel"
)

// New builds the social module from its parts.
func New(d app.Deps) (app.Module, error) {
	_, relPart, err := rel.New(d)
	if err != nil {
		return app.Module{}, err
	}
	_, likePart, err := like.New(d)
	if err != nil {
		return app.Module{}, err
	}
	_, feedPart, err := feed.New(d)
	if err != nil {
		return app.Module{}, err
	}
	return merge("social", relPart, feedPart, likePart), nil
}

// merge mounts the parts as one module: every part's routes, tasks,
// kinds and seed, in order (rel's seed first: feed and like seed on it).
func merge(name string, parts ...app.Module) app.Module {
	m := app.Module{Name: name}
	for _, p := range parts {
		m.Tasks = append(m.Tasks, p.Tasks...)
		m.Kinds = append(m.Kinds, p.Kinds...)
		m.LargeBodyPrefixes = append(m.LargeBodyPrefixes, p.LargeBodyPrefixes...)
	}
	m.Routes = func(e *echo.Echo) {
		for _, p := range parts {
			if p.Routes != nil {
				p.Routes(e)
			}
		}
	}
	m.Seed = func(ctx context.Context) error {
		for _, p := range parts {
			if p.Seed != nil {
				if err := p.Seed(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return m
}
