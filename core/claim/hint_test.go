package claim

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// The worker pool starts each claim's scan after the furthest row it has
// claimed (scanHint, sqlClaim), so it does not walk the dead index entries
// its own claims left. A ready row behind that place — here, two rows the
// hint has passed as if their claimer had rolled back — must still be
// claimed: by the scan from the head that follows a short claim, and by
// the one taken once fromHeadEvery has passed (set by hand, not waited
// for).
func TestAReadyRowBehindTheScanHintIsStillClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := NewClient(db, Options{Log: quiet, Metrics: prometheus.NewRegistry(), Owner: "hint-test"})
	require.NoError(t, c.Register(Kind{Name: "t.hint", Handle: func(context.Context, *Job) error { return nil }}))
	now := time.Now()
	for i, due := range []time.Duration{-3 * time.Second, -2 * time.Second, -time.Second} {
		_, _, err := c.Enqueue(ctx, db, NewJob{Kind: "t.hint", BusinessKey: []string{"a", "b", "c"}[i], DueAt: now.Add(due)})
		require.NoError(t, err)
	}
	var b position
	require.NoError(t, db.QueryRow(ctx, `SELECT due_at, created_at, id FROM job WHERE business_key = 'b'`).Scan(&b.due, &b.created, &b.id))

	p := &pool{c: c, o: c.poolDefaults(PoolOptions{Kinds: []string{"t.hint"}}), held: map[int64]*held{}}

	// The hint is past a and b, taken from the head just now: the scan
	// starts after b and finds only c. That claim is short (3 asked).
	p.hint = scanHint{after: b, fromHead: time.Now()}
	_, jobs, err := p.roundTrip(ctx, nil, 3, false)
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, keys(jobs), "the scan started after the hint")
	require.True(t, p.hint.short)

	// Short: the next claim scans from the head and finds a and b.
	_, jobs, err = p.roundTrip(ctx, nil, 3, false)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, keys(jobs), "rows behind the hint are claimed from the head")

	// Not short, but fromHeadEvery has passed: from the head too.
	p.hint = scanHint{after: b, fromHead: time.Now().Add(-fromHeadEvery)}
	require.Equal(t, position{}, p.claimFrom())
	p.hint = scanHint{after: b, fromHead: time.Now()}
	require.Equal(t, b, p.claimFrom(), "within fromHeadEvery a full claim keeps the hint")

	invariant.MustRegistry(Invariants).Assert(t, db, "claim")
}

func keys(jobs []*Job) []string {
	out := make([]string, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.BusinessKey)
	}
	return out
}
