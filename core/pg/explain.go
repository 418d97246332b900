package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// When a probe's query runs: the three costs that must not grow with
// history (docs/DATA.md).
type When string

const (
	Periodic   When = "periodic"    // a purge batch, a recovery sweep
	PerScrape  When = "per-scrape"  // a /metrics collector
	PerRequest When = "per-request" // an HTTP read
)

// Bound says what a probe's rows examined may be proportional to: its
// batch, the live set (queued jobs, unconsumed events), or both. Never
// the history.
type Bound struct {
	Batch int64 // rows per batch (0: none)
	Live  bool  // proportional to the live set
}

// Batch bounds a probe by its batch size.
func Batch(n int) Bound { return Bound{Batch: int64(n)} }

// Live bounds a probe by the live set.
var Live = Bound{Live: true}

// Max is the most rows a probe with this bound may examine when the
// live set holds live rows: a small multiple of the batch and of the
// live set (a purge touches a row in the table and its index, an event
// and its inbox row…), plus a constant for per-kind and per-topic probes.
func (b Bound) Max(live int64) int64 {
	m := int64(500) + 6*b.Batch
	if b.Live {
		m += 6 * live
	}
	return m
}

// Probe is one query whose cost must not grow with history, with
// arguments that make it do its real work.
type Probe struct {
	Name  string
	When  When
	SQL   string
	Args  []any
	Bound Bound
}

// Plan is what EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) measured.
type Plan struct {
	Examined int64   // rows produced or removed by every scan, plus join-filter removals
	Buffers  int64   // shared buffers hit or read by the whole statement
	Ms       float64 // execution time
	Text     string  // the JSON plan, for failure messages
}

// Explain runs sql under EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) in a
// transaction it rolls back, so a purge can be measured without deleting,
// and sums the rows every scan node examined. It is the one plan walker:
// the growth probes (docs/DATA.md), the claim plan tests and the feed's
// rows-scanned-per-read all count by examined's rule.
func Explain(ctx context.Context, db TxBeginner, sql string, args ...any) (Plan, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Plan{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		return Plan{}, fmt.Errorf("explain: %w", err)
	}
	var doc []struct {
		Plan          node    `json:"Plan"`
		ExecutionTime float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		return Plan{}, errors.Join(errors.New("explain: unexpected output"), err)
	}
	return Plan{Examined: doc[0].Plan.examined(), Buffers: doc[0].Plan.SharedHit + doc[0].Plan.SharedRead,
		Ms: doc[0].ExecutionTime, Text: string(raw)}, nil
}

type node struct {
	Type           string  `json:"Node Type"`
	Rows           float64 `json:"Actual Rows"`
	Loops          float64 `json:"Actual Loops"`
	RemovedFilter  float64 `json:"Rows Removed by Filter"`
	RemovedRecheck float64 `json:"Rows Removed by Index Recheck"`
	RemovedJoin    float64 `json:"Rows Removed by Join Filter"`
	HeapFetches    float64 `json:"Heap Fetches"`
	SharedHit      int64   `json:"Shared Hit Blocks"` // the node's and its children's
	SharedRead     int64   `json:"Shared Read Blocks"`
	Plans          []node  `json:"Plans"`
}

// examined counts, for every scan, the rows it returned and the rows it
// read and threw away (per loop, times the loops), and the rows a join
// filter threw away: the work that grows when a plan walks history. Join
// filter removals count because a nested loop that reads history and
// rejects it in the join filter does that work without any scan node
// filtering it; every relation scan type counts (Tid and Sample scans
// read the table too); a node that never ran (0 loops) reports 0 rows,
// so max(loops, 1) adds nothing for it.
func (n node) examined() int64 {
	var sum float64
	switch n.Type { // relation scans; CTE, subquery and function scans re-read rows already counted
	case "Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Tid Scan", "Tid Range Scan", "Sample Scan":
		sum += (n.Rows + n.RemovedFilter + n.RemovedRecheck) * max(n.Loops, 1)
	}
	sum += n.RemovedJoin * max(n.Loops, 1)
	for _, c := range n.Plans {
		sum += float64(c.examined())
	}
	return int64(sum)
}
