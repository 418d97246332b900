package feed

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencelab/fencelab/services/social/rel"
)

// GraphConfig shapes a synthetic follow graph. The zero value of a field
// takes its default (DefaultGraph).
type GraphConfig struct {
	Users int    // number of users (10,000)
	Seed  uint64 // the same seed and config give the same graph
	// Prefix names users Prefix + 5 digits ("user-00042"), apart from the
	// demo users' four digits.
	Prefix string
	// Followees is the mean number of accounts a user follows (20),
	// log-normally spread (σ = 1) and capped at Users/5.
	Followees float64
	// ZipfS is the popularity exponent (1.1): the author of popularity
	// rank k is picked with probability ∝ (k+1)^-s, which gives the heavy
	// tail of follower counts (a few celebrities, most with a handful).
	ZipfS float64
	// PostsPerUser is the mean number of posts per user (10, exponential).
	PostsPerUser float64
	// Private is the share of private accounts (0.1); Pending the share of
	// follows of private accounts left pending (0.2); Blocks the share of
	// users who block one stranger (0.01).
	Private, Pending, Blocks float64
	// Start and Span place the posts' created_at, uniformly (2026-01-01,
	// 30 days), at microsecond resolution.
	Start time.Time
	Span  time.Duration
}

// DefaultGraph is the benchmark's graph.
var DefaultGraph = GraphConfig{
	Users: 10_000, Seed: 1, Prefix: "user-", Followees: 20, ZipfS: 1.1, PostsPerUser: 10,
	Private: 0.1, Pending: 0.2, Blocks: 0.01,
	Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Span: 30 * 24 * time.Hour,
}

// withDefaults fills each field left at its zero value from DefaultGraph.
func (c GraphConfig) withDefaults() GraphConfig {
	d := DefaultGraph
	c.Users = cmp.Or(c.Users, d.Users)
	c.Prefix = cmp.Or(c.Prefix, d.Prefix)
	c.Followees = cmp.Or(c.Followees, d.Followees)
	c.ZipfS = cmp.Or(c.ZipfS, d.ZipfS)
	c.PostsPerUser = cmp.Or(c.PostsPerUser, d.PostsPerUser)
	c.Private = cmp.Or(c.Private, d.Private)
	c.Pending = cmp.Or(c.Pending, d.Pending)
	c.Blocks = cmp.Or(c.Blocks, d.Blocks)
	if c.Start.IsZero() {
		c.Start = d.Start
	}
	c.Span = cmp.Or(c.Span, d.Span)
	return c
}

// Graph is a generated follow graph with posts: users are indexes into
// Users.
type Graph struct {
	Config  GraphConfig
	Users   []graphUser
	Follows []graphFollow
	Blocks  []graphBlock
	Posts   []graphPost // in created_at order (the order they are loaded)
}

// graphUser is a generated profile.
type graphUser struct {
	ID      string
	Private bool
}

// graphFollow is a follow: active, or pending on a private account.
type graphFollow struct {
	Follower, Followee int
	Pending            bool
}

// graphBlock is a block between users who do not follow each other.
type graphBlock struct{ Blocker, Blocked int }

// graphPost is a generated post.
type graphPost struct {
	Author     int
	CreatedAt  time.Time
	Visibility rel.Visibility
}

// Generate builds the graph c describes; it is a pure function of c.
func Generate(c GraphConfig) (*Graph, error) {
	c = c.withDefaults()
	if c.Users < 2 || c.Users > 10_000_000 {
		return nil, fmt.Errorf("feed: graph users must be 2..10,000,000, got %d", c.Users)
	}
	if c.ZipfS <= 1 || c.Followees < 1 || c.PostsPerUser < 0 {
		return nil, fmt.Errorf("feed: graph needs zipf s > 1, followees >= 1, posts per user >= 0")
	}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	g := &Graph{Config: c, Users: make([]graphUser, c.Users)}
	for i := range g.Users {
		g.Users[i] = graphUser{ID: fmt.Sprintf("%s%05d", c.Prefix, i), Private: rng.Float64() < c.Private}
	}
	// Popularity ranks are a random permutation of the users, so the
	// celebrities are not simply the first ids.
	byRank := rng.Perm(c.Users)
	zipf := rand.NewZipf(rng, c.ZipfS, 1, uint64(c.Users-1))
	maxFollowees := max(1, c.Users/5)
	mu := math.Log(c.Followees) - 0.5 // log-normal with σ = 1 and mean Followees
	follows := make(map[[2]int]bool)
	for u := range c.Users {
		want := min(maxFollowees, max(1, int(math.Exp(mu+rng.NormFloat64()))))
		chosen := make(map[int]bool, want)
		for tries := 0; len(chosen) < want && tries < 20*want; tries++ {
			v := byRank[zipf.Uint64()]
			if v != u {
				chosen[v] = true
			}
		}
		vs := make([]int, 0, len(chosen))
		for v := range chosen {
			vs = append(vs, v)
		}
		slices.Sort(vs) // map order is random; the graph must not be
		for _, v := range vs {
			pending := g.Users[v].Private && rng.Float64() < c.Pending
			g.Follows = append(g.Follows, graphFollow{Follower: u, Followee: v, Pending: pending})
			follows[[2]int{u, v}] = true
		}
	}
	for u := range c.Users {
		if rng.Float64() >= c.Blocks {
			continue
		}
		v := rng.IntN(c.Users)
		if v == u || follows[[2]int{u, v}] || follows[[2]int{v, u}] {
			continue
		}
		g.Blocks = append(g.Blocks, graphBlock{Blocker: u, Blocked: v})
		follows[[2]int{u, v}], follows[[2]int{v, u}] = true, true // one relation per pair
	}
	for u := range c.Users {
		n := int(rng.ExpFloat64()*c.PostsPerUser + 0.5)
		for range n {
			vis := rel.Public
			switch x := rng.Float64(); {
			case x < 0.05:
				vis = rel.Self
			case x < 0.25:
				vis = rel.Followers
			}
			at := c.Start.Add(time.Duration(rng.Int64N(int64(c.Span/time.Microsecond))) * time.Microsecond)
			g.Posts = append(g.Posts, graphPost{Author: u, CreatedAt: at, Visibility: vis})
		}
	}
	slices.SortStableFunc(g.Posts, func(a, b graphPost) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return g, nil
}

// FollowerCounts returns each user's active followers.
func (g *Graph) FollowerCounts() []int {
	n := make([]int, len(g.Users))
	for _, f := range g.Follows {
		if !f.Pending {
			n[f.Followee]++
		}
	}
	return n
}
