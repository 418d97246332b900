package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/pg"
)

// ScanStats is what one page read cost the database, from EXPLAIN
// (ANALYZE, BUFFERS): the benchmark's "rows scanned per read".
type ScanStats struct {
	// RowsScanned counts the rows every scan node produced or filtered
	// out, over all its loops: index entries and heap rows the statement
	// had to look at, whatever it returned.
	RowsScanned int64
	// Buffers is the shared buffers hit or read.
	Buffers int64
	// Execution is the server's execution time.
	Execution time.Duration
}

// Explain runs a first page of reader's feed under strategy st with
// EXPLAIN (ANALYZE, BUFFERS) and returns its cost (the statement runs; it
// writes nothing: the response log is left out).
func (s *Service) Explain(ctx context.Context, st Strategy, reader string, limit int) (ScanStats, error) {
	pos := first(strategyCode(st.Name()))
	var out []byte
	err := s.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+st.sql(false),
		pageArgs(st, reader, pos, limit)).Scan(&out)
	if err != nil {
		return ScanStats{}, fmt.Errorf("feed: explain %s for %s: %w", st.Name(), reader, pg.MapError(err))
	}
	var doc []struct {
		Plan      planNode `json:"Plan"`
		Execution float64  `json:"Execution Time"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc) != 1 {
		return ScanStats{}, fmt.Errorf("feed: explain: unexpected output: %v", err)
	}
	st0 := ScanStats{
		Buffers:   doc[0].Plan.SharedHit + doc[0].Plan.SharedRead,
		Execution: time.Duration(doc[0].Execution * float64(time.Millisecond)),
	}
	st0.RowsScanned = doc[0].Plan.scanned()
	return st0, nil
}

type planNode struct {
	NodeType      string     `json:"Node Type"`
	ActualRows    float64    `json:"Actual Rows"`
	ActualLoops   float64    `json:"Actual Loops"`
	RemovedFilter float64    `json:"Rows Removed by Filter"`
	RemovedRechk  float64    `json:"Rows Removed by Index Recheck"`
	SharedHit     int64      `json:"Shared Hit Blocks"`
	SharedRead    int64      `json:"Shared Read Blocks"`
	Plans         []planNode `json:"Plans"`
}

func (n planNode) scanned() int64 {
	var total int64
	switch n.NodeType {
	case "Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan":
		total = int64((n.ActualRows + n.RemovedFilter + n.RemovedRechk) * n.ActualLoops)
	}
	for _, c := range n.Plans {
		total += c.scanned()
	}
	return total
}
