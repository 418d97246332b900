package feed

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// scanStats is what one page read cost the database, from EXPLAIN
// (ANALYZE, BUFFERS): the benchmark's "rows scanned per read".
type scanStats struct {
	// RowsScanned counts the rows every scan node produced or filtered
	// out, over all its loops, and the rows join filters threw away: what
	// the statement had to look at, whatever it returned (pg.Plan.Examined).
	RowsScanned int64
	// Buffers is the shared buffers hit or read.
	Buffers int64
	// Execution is the server's execution time.
	Execution time.Duration
}

// Explain runs a first page of reader's feed under strategy st with
// EXPLAIN (ANALYZE, BUFFERS) in a transaction pg.Explain rolls back, and
// returns its cost counted by pg.Explain's rule.
func (s *Service) Explain(ctx context.Context, st Strategy, reader string, limit int) (scanStats, error) {
	pos := first(strategyCode(st.Name()))
	stmt := st.sql(false)
	p, err := pg.Explain(ctx, s.pool, stmt.SQL, stmt.Args(pageArgs(st, reader, pos, limit))...)
	if err != nil {
		return scanStats{}, fmt.Errorf("feed: explain %s for %s: %w", st.Name(), reader, pg.MapError(err))
	}
	return scanStats{RowsScanned: p.Examined, Buffers: p.Buffers,
		Execution: time.Duration(p.Ms * float64(time.Millisecond))}, nil
}
