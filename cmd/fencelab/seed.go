package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/migrations"
	"github.com/fencelab/fencelab/services/social/feed"
)

// runSeed is `fencelab seed NAME`: synthetic data sets for experiments and
// benchmarks, loaded into DATABASE_URL (the demo data `dev` writes is each
// module's Seed, not this).
func runSeed(args []string) error {
	if len(args) == 0 || args[0] != "social" {
		fmt.Fprintln(os.Stderr, "Usage: fencelab seed social [flags]   (fencelab seed social --help for its flags)")
		return errUsage
	}
	return seedSocial(args[1:])
}

// seedSocial loads a generated heavy-tailed follow graph with posts (the
// feed benchmark's graph) and builds the feed's derived state for a
// strategy.
func seedSocial(args []string) error {
	loadLocalEnv("")
	fs := newFlags("seed social", "seed social --users N --seed S [flags]")
	d := feed.DefaultGraph
	url := fs.String("database-url", app.Env("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	migrate := fs.Bool("migrate", false, "apply pending migrations first")
	users := fs.Int("users", d.Users, "users in the graph")
	seed := fs.Uint64("seed", d.Seed, "generator seed: the same seed and flags give the same graph")
	prefix := fs.String("prefix", d.Prefix, "user id prefix (ids are PREFIX + 5 digits)")
	followees := fs.Float64("followees", d.Followees, "mean accounts a user follows")
	posts := fs.Float64("posts-per-user", d.PostsPerUser, "mean posts per user")
	zipf := fs.Float64("zipf", d.ZipfS, "popularity exponent (> 1): larger is a heavier celebrity tail")
	strategy := fs.String("strategy", app.Env(feed.EnvStrategy, "hybrid"), "fan-out strategy the inboxes are built with: push, pull or hybrid ("+feed.EnvStrategy+")")
	threshold := fs.Int64("threshold", int64(app.EnvInt(feed.EnvThreshold, feed.DefaultThreshold)), "hybrid: authors with this many followers or more are pulled ("+feed.EnvThreshold+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *url == "" {
		return errNoDatabase
	}
	st, err := feed.ParseStrategy(*strategy, *threshold)
	if err != nil {
		return err
	}
	if *migrate {
		if err := (pg.Migrator{FS: migrations.FS, URL: *url}).Up(); err != nil {
			return err
		}
	}
	g, err := feed.Generate(feed.GraphConfig{Users: *users, Seed: *seed, Prefix: *prefix,
		Followees: *followees, PostsPerUser: *posts, ZipfS: *zipf})
	if err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pg.Connect(ctx, *url, pg.PoolOptions{MaxConns: 2, ApplicationName: "fencelab-seed"})
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	s, err := feed.Load(ctx, pool, g, st)
	if err != nil {
		return err
	}
	counts := g.FollowerCounts()
	top := slices.Clone(counts)
	slices.Sort(top)
	slices.Reverse(top)
	fmt.Printf("seeded %d users, %d relations, %d posts (seed %d) in %s: truth %s, feed %s, views %s, analyze %s\n",
		s.Users, s.Relations, s.Posts, *seed, time.Since(start).Round(time.Millisecond), s.Truth.Round(time.Millisecond),
		s.Derived.Round(time.Millisecond), s.Views.Round(time.Millisecond), s.Analyzed.Round(time.Millisecond))
	fmt.Printf("followers: top %v, p99 %d, median %d\n", top[:min(5, len(top))], top[len(top)/100], top[len(top)/2])
	fmt.Printf("feed (%s): %d posts settled, %d pushed, %d inbox rows, %d authors pulled\n",
		describe(st, *threshold), s.Settled, s.Pushed, s.Inbox, s.PullSet)
	return nil
}

// describe names the strategy the inboxes were built with, and hybrid's
// threshold (the one ParseStrategy was given).
func describe(st feed.Strategy, threshold int64) string {
	if st.Name() == "hybrid" {
		return "hybrid, threshold " + strconv.FormatInt(threshold, 10)
	}
	return st.Name()
}
