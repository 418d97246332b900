package feed

import (
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestCursorRoundTripsAndRefusesEveryForgery: a cursor decodes to what was
// encoded for its reader, and every change — any bit of it, another
// reader, another key, a truncation, garbage — is ErrInvalidCursor.
func TestCursorRoundTripsAndRefusesEveryForgery(t *testing.T) {
	t.Parallel()
	key := CursorKey([]byte("a-token-secret-of-some-length"))
	p := position{Strategy: strategyCode("hybrid"),
		At: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC), ID: 4242,
		TopAt: time.Date(2026, 3, 2, 8, 30, 0, 1000, time.UTC), TopID: 9001, Seen: 77}
	s := p.encode(key, "user-0042")
	got, err := decodeCursor(key, "user-0042", s)
	if err != nil || got != p {
		t.Fatalf("round trip: got %+v, %v; want %+v", got, err, p)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(s)
	for i := range raw {
		for bit := range 8 {
			b := slices.Clone(raw)
			b[i] ^= 1 << bit
			if _, err := decodeCursor(key, "user-0042", base64.RawURLEncoding.EncodeToString(b)); !errors.Is(err, errInvalidCursor) {
				t.Fatalf("byte %d bit %d flipped: accepted (%v)", i, bit, err)
			}
		}
	}
	for name, c := range map[string]struct {
		key       []byte
		reader, s string
	}{
		"another reader": {key, "user-0043", s},
		"another key":    {CursorKey([]byte("another-deployment-secret")), "user-0042", s},
		"truncated":      {key, "user-0042", s[:len(s)-1]},
		"extended":       {key, "user-0042", s + "A"},
		"not base64":     {key, "user-0042", "!" + s[1:]},
		"empty":          {key, "user-0042", ""},
		"rel's cursor":   {key, "user-0042", "AAAAAAAAAAAAAAAAAAAAAA"},
	} {
		if _, err := decodeCursor(c.key, c.reader, c.s); !errors.Is(err, errInvalidCursor) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
}

// TestGenerateIsDeterministicAndHeavyTailed: one seed, one graph; follower
// counts have a celebrity head far above the median; no self-follow, no
// duplicate pair, no follow inside a blocked pair (REL-I2 on load).
func TestGenerateIsDeterministicAndHeavyTailed(t *testing.T) {
	t.Parallel()
	c := GraphConfig{Users: 2000, Seed: 11}
	a, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(c)
	if !slices.Equal(a.Follows, b.Follows) || !slices.Equal(a.Posts, b.Posts) || !slices.Equal(a.Blocks, b.Blocks) || !slices.Equal(a.Users, b.Users) {
		t.Fatal("the same config generated two different graphs")
	}
	other, _ := Generate(GraphConfig{Users: 2000, Seed: 12})
	if slices.Equal(a.Follows, other.Follows) {
		t.Fatal("another seed generated the same follows")
	}
	counts := a.FollowerCounts()
	sorted := slices.Clone(counts)
	slices.Sort(sorted)
	median, top := sorted[len(sorted)/2], sorted[len(sorted)-1]
	if top < 50*max(median, 1) || top < len(a.Users)/4 {
		t.Fatalf("not heavy-tailed: top %d, median %d", top, median)
	}
	pairs := map[[2]int]bool{}
	for _, f := range a.Follows {
		if f.Follower == f.Followee || pairs[[2]int{f.Follower, f.Followee}] {
			t.Fatalf("bad follow %+v", f)
		}
		if f.Pending && !a.Users[f.Followee].Private {
			t.Fatalf("pending follow of a public account %+v", f)
		}
		pairs[[2]int{f.Follower, f.Followee}] = true
	}
	for _, bl := range a.Blocks {
		if pairs[[2]int{bl.Blocker, bl.Blocked}] || pairs[[2]int{bl.Blocked, bl.Blocker}] {
			t.Fatalf("block inside a follow %+v", bl)
		}
	}
	if !slices.IsSortedFunc(a.Posts, func(x, y graphPost) int { return x.CreatedAt.Compare(y.CreatedAt) }) {
		t.Fatal("posts are not in created_at order")
	}
}

// TestParseStrategy: names map to strategies and their fan-out decision.
func TestParseStrategy(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int64{"push": always, "pull": 0, "hybrid": 300} {
		st, err := ParseStrategy(name, 300)
		if err != nil || st.Name() != name || st.pushesBelow() != want || strategyCode(name) == 0 {
			t.Errorf("%s: %v %v", name, st, err)
		}
	}
	for _, bad := range []string{"", "PUSH", "fanout"} {
		if _, err := ParseStrategy(bad, 300); !errors.Is(err, errInvalidStrategy) {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseStrategy("hybrid", 0); err == nil {
		t.Error("hybrid with threshold 0 accepted")
	}
}
