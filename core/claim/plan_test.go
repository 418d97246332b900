package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/invariant"
	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// The pool's hot statements are prepared (pgx caches them per connection),
// so after five executions PostgreSQL may run them with a generic plan: one
// that knows neither the LIMIT nor the arrays. Such a plan once hashed the
// whole job table on every claim and filtered every running job against
// every completion of a batch. This forces the generic plan over a table
// whose history (finished jobs) and running set dwarf the batch, and bounds
// the rows each statement examines by its batch: the cost of a claim or a
// completion must not grow with the history or with other owners' work.
func TestHotStatementsExamineTheirBatchInGenericPlans(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	const history, running, ready, batch = 20_000, 2_000, 20_000, 100
	// The history in job_history, where finished jobs live (today's day
	// partition): the stale branches read it through job_all.
	_, err := pool.Exec(ctx, `
		INSERT INTO job_history (id, kind, business_key, state, payload, due_at, created_at, updated_at,
		                         attempts, max_attempts, owner, fence)
		SELECT nextval('job_id_seq'), 't.plan', 'done-' || g, 'succeeded', '{}', now(), now(), now(), 1, 5, 'old', 1
		  FROM generate_series(1, $1) g`, history)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO job (kind, business_key, state, owner, fence, attempts, lease_until)
		SELECT 't.plan', 'run-' || g, 'running', 'other', 1, 1, now() + interval '1 hour' FROM generate_series(1, $1) g`, running)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO job (kind, business_key) SELECT 't.plan', 'ready-' || g FROM generate_series(1, $1) g`, ready)
	require.NoError(t, err)
	// Their history, as the engine would have written it (CLAIM-I2..I4).
	_, err = pool.Exec(ctx, `
		INSERT INTO job_event (job_id, event, fence, owner, state)
		SELECT id, 'claimed', 1, coalesce(owner, 'old'), 'running' FROM job_all WHERE state IN ('succeeded', 'running')
		UNION ALL
		SELECT id, 'succeeded', 1, 'old', 'succeeded' FROM job_history
		ORDER BY 1, 2`)
	require.NoError(t, err)
	// The statistics a queue usually has: taken when nothing was running.
	_, err = pool.Exec(ctx, `ANALYZE job, job_history`)
	require.NoError(t, err)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `RESET plan_cache_mode; DEALLOCATE ALL`) }()

	explain := func(name, sql, types, args string) int64 {
		t.Helper()
		_, err := conn.Exec(ctx, fmt.Sprintf("PREPARE %s(%s) AS %s", name, types, sql))
		require.NoError(t, err)
		plan, err := pg.Explain(ctx, conn, fmt.Sprintf("EXECUTE %s(%s)", name, args))
		require.NoError(t, err)
		n := plan.Examined
		t.Logf("%s: %d rows examined for a batch of %d", name, n, batch)
		// A sequential scan is allowed only of an empty relation: the day
		// partitions ahead of today are empty, never analyzed, and planned
		// as a scan of nothing (a day that fills is analyzed by
		// autovacuum). Any other is a walk of the queue or the history.
		for _, rel := range seqScanned(t, plan.Text) {
			var rows bool
			require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s)", pgx.Identifier{rel}.Sanitize())).Scan(&rows))
			require.False(t, rows, "%s scans %s:\n%s", name, rel, plan.Text)
		}
		return n
	}

	// Claim a batch: the ready rows it takes and their primary-key probes.
	// claimStmt's $n order is its names' first appearance: list both by name.
	// Its scan's LIMIT is a literal (the bucket of batch, 128); the update
	// takes $limit of it.
	inOrder := func(by pgx.NamedArgs) string {
		var out []string
		for _, v := range claimStmt(batch).Args(by) {
			out = append(out, v.(string))
		}
		return strings.Join(out, ", ")
	}
	n := explain("claim_probe", claimStmt(batch).SQL,
		inOrder(pgx.NamedArgs{"kinds": "text[]", "limit": "int", "owner": "text", "lease_us": "bigint",
			"after_due": "timestamptz", "after_created": "timestamptz", "after_id": "bigint"}),
		inOrder(pgx.NamedArgs{"kinds": "'{t.plan}'", "limit": strconv.Itoa(batch), "owner": "'me'", "lease_us": "30000000",
			"after_due": "'0001-01-01 00:00:00+00'", "after_created": "'0001-01-01 00:00:00+00'", "after_id": "0"}))
	require.LessOrEqual(t, n, int64(4*batch))

	// Complete a batch of the claimed jobs (claimed for real: the EXPLAIN
	// above rolled back).
	_, err = pool.Exec(ctx, `
		WITH c AS (
		    UPDATE job SET state = 'running', owner = 'me', fence = 1, attempts = 1, lease_until = now() + interval '1 hour'
		    WHERE id IN (SELECT id FROM job WHERE state = 'ready' ORDER BY id LIMIT $1)
		    RETURNING id)
		INSERT INTO job_event (job_id, event, fence, owner, state) SELECT id, 'claimed', 1, 'me', 'running' FROM c`, batch)
	require.NoError(t, err)
	var ids []string
	var fences []string
	rows, err := pool.Query(ctx, `SELECT id FROM job WHERE owner = 'me' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, fmt.Sprint(id))
		fences = append(fences, fmt.Sprintf(`"%d":[1,%d]`, id, len(ids)))
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, batch)
	nulls := strings.TrimSuffix(strings.Repeat("NULL,", batch), ",")
	n = explain("complete_probe", sqlComplete, "bigint[], jsonb, text[], text, bool",
		fmt.Sprintf("'{%s}', '{%s}', '{%s}', 'me', true", strings.Join(ids, ","), strings.Join(fences, ","), nulls))
	require.LessOrEqual(t, n, int64(4*batch))

	// Heartbeat the same batch: its renewal reaches the rows the same way.
	ones := strings.TrimSuffix(strings.Repeat("1,", batch), ",")
	var fenceMap []string
	for _, id := range ids {
		fenceMap = append(fenceMap, fmt.Sprintf(`"%s":1`, id))
	}
	n = explain("heartbeat_probe", sqlHeartbeat, "bigint[], bigint[], text, bigint, jsonb",
		fmt.Sprintf("'{%s}', '{%s}', 'me', 30000000, '{%s}'", strings.Join(ids, ","), ones, strings.Join(fenceMap, ",")))
	require.LessOrEqual(t, n, int64(4*batch))

	invariant.MustRegistry(Invariants).Assert(t, pool, "claim")
}

// completeAndClaim's promise of one commit (one WAL flush) per round trip
// rests on pgx sending a batch with a single Sync, which PostgreSQL runs as
// one implicit transaction. If a pgx upgrade changed that, the statements
// would stay correct (each is fenced and all-or-nothing on its own) but the
// round trip would cost two flushes again: this says so.
func TestABatchIsOneTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_current_xact_id()::text`)
	b.Queue(`SELECT pg_current_xact_id()::text`)
	br := pool.SendBatch(ctx, b)
	var first, second string
	require.NoError(t, br.QueryRow().Scan(&first))
	require.NoError(t, br.QueryRow().Scan(&second))
	require.NoError(t, br.Close())
	require.Equal(t, first, second, "the statements of one batch ran in different transactions")
	invariant.MustRegistry(Invariants).Assert(t, pool, "claim")
}

// seqScanned lists the relations a JSON plan reads with a Seq Scan.
func seqScanned(t *testing.T, plan string) []string {
	t.Helper()
	var doc []map[string]any
	require.NoError(t, json.Unmarshal([]byte(plan), &doc))
	var out []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" {
			out = append(out, n["Relation Name"].(string))
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	for _, d := range doc {
		walk(d["Plan"].(map[string]any))
	}
	return out
}
