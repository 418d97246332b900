package shortlink

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// BenchmarkClickBatch is the writer's side of a click: one op is one
// click, written in batches of DefaultConfig().ClickBatch by the statement
// the writer uses (SL-I4, SL-I5). The redirect's cost on a shared machine
// is mostly this: every click is a row PostgreSQL inserts and indexes.
//
//	go test ./services/shortlink/ -run '^$' -bench ClickBatch -benchmem
func BenchmarkClickBatch(b *testing.B) {
	pool := pgtest.New(b)
	ctx := context.Background()
	_, _, err := createLink(ctx, pool, "Bench123", "https://example.test/", "user-0042", false, nil)
	require.NoError(b, err)
	size := DefaultConfig().ClickBatch
	batch := make([]click, size)
	rows := &clickRows{}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += size {
		n := min(size, b.N-done)
		now := time.Now()
		for i := range n {
			batch[i] = click{code: "Bench123", at: now}
		}
		rows.fill(batch[:n])
		require.NoError(b, insertClicks(ctx, pool, rows))
	}
	b.StopTimer()
	var stored int
	require.NoError(b, pool.QueryRow(ctx, `SELECT clicks FROM shortlink_click_count WHERE code = 'Bench123'`).Scan(&stored))
	require.Equal(b, b.N, stored, "every click of every batch counted once")
	invariants.Assert(b, pool, "shortlink")
}
