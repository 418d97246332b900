package shortlink

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
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
	batch := DefaultConfig().ClickBatch
	ids := make([]uuid.UUID, batch)
	codes := make([]string, batch)
	ats := make([]time.Time, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		now := time.Now().Truncate(time.Microsecond)
		for i := range n {
			ids[i], codes[i], ats[i] = uuid.Must(uuid.NewV7()), "Bench123", now
		}
		require.NoError(b, insertClicks(ctx, pool, ids[:n], codes[:n], ats[:n]))
	}
}
