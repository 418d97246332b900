package shortlink

import (
	"context"
	"os"
	"strconv"
	"strings"
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
	// One connection, so its backend's CPU time is the database's side of
	// the clicks (wall time on a shared machine says little).
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	var backend int
	require.NoError(b, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend))
	cpu0 := backendCPU(b, backend)
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
		require.NoError(b, insertClicks(ctx, conn, rows, false))
	}
	b.StopTimer()
	b.ReportMetric(float64((backendCPU(b, backend)-cpu0).Microseconds())/float64(b.N), "pg-cpu-µs/click")
	var stored int
	require.NoError(b, pool.QueryRow(ctx, `SELECT clicks FROM shortlink_click_count WHERE code = 'Bench123'`).Scan(&stored))
	require.Equal(b, b.N, stored, "every click of every batch counted once")
	invariants.Assert(b, pool, "shortlink")
}

// backendCPU is the user and system time of a local PostgreSQL backend
// (/proc/<pid>/stat, in USER_HZ ticks of 10ms).
func backendCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(b, err, "the benchmark's database runs on this machine")
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
