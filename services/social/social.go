// Package social is the social case study: relations (rel,
// chapter 8), the home feed (chapter 9) and like counters (chapter 10), one
// module on one truth table, which rel owns: feed and like read it (the
// cross-reads docs/DATA.md lists) and write it only through rel's functions
// (rel.EnsureUser, rel.Load*). Each part builds its own runtime; Module
// merges them.
package social

import (
	"slices"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/services/social/feed"
	"github.com/fencelab/fencelab/services/social/like"
	"github.com/fencelab/fencelab/services/social/rel"
)

// Module is the social case study; its chapters are its parts'.
func Module() app.Module {
	return app.Module{
		Name:       "social",
		Invariants: slices.Concat(rel.Invariants, feed.Invariants, like.Invariants),
		Errors:     slices.Concat(rel.Errors, feed.Errors, like.Errors),
		Build:      build,
	}
}

// build mounts the parts as one runtime: every part's routes, tasks,
// kinds and seed, in order (rel's seed first: feed and like seed on it).
func build(d app.Deps) (app.Runtime, error) {
	relPart, err := rel.Build(d)
	if err != nil {
		return app.Runtime{}, err
	}
	likePart, err := like.Build(d)
	if err != nil {
		return app.Runtime{}, err
	}
	feedPart, err := feed.Build(d)
	if err != nil {
		return app.Runtime{}, err
	}
	return app.Merge(relPart, feedPart, likePart), nil
}
