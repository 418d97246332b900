package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/fakeprovider"
	"github.com/fencelab/fencelab/services/workflow"
)

// startTool runs the workflow's external tool (the fake provider with
// idempotency keys and query by key) on port, for the cluster's processes
// to call; its effect ledger is the ground truth of what happened outside
// the database. It returns the environment entry that points them at it.
func startTool(t *testing.T, port int) (*fakeprovider.Server, string) {
	t.Helper()
	tool, err := fakeprovider.StartOn(fmt.Sprintf("127.0.0.1:%d", port),
		fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true, Query: true})
	require.NoError(t, err)
	t.Cleanup(tool.Close)
	return tool, workflow.EnvToolURL + "=" + tool.URL()
}

// waitWorkflows waits until every workflow job in the database has
// finished (the workers run them), so the tool's ledger is complete.
func waitWorkflows(t *testing.T, c *cluster) {
	t.Helper()
	require.Eventually(t, func() bool {
		var open int
		err := c.db.QueryRow(context.Background(),
			`SELECT count(*) FROM job_all WHERE kind = 'workflow' AND state NOT IN ('succeeded', 'failed', 'cancelled')`).Scan(&open)
		return err == nil && open == 0
	}, 60*time.Second, 100*time.Millisecond, "every workflow job finishes")
}

// workflowEffects joins the database's workflow jobs against the tool's
// ledger: each succeeded job made exactly one effect, under its key, and it
// is the effect its result names (no effect twice); effects whose job the
// database does not have are returned (the async loss leaves them behind:
// the tool acted on a job the promoted standby never heard of).
func workflowEffects(t *testing.T, c *cluster, tool *fakeprovider.Server) (jobs int, orphans []string) {
	t.Helper()
	rows, err := c.db.Query(context.Background(),
		`SELECT business_key, state, coalesce(result->>'effect_id', '') FROM job_all WHERE kind = 'workflow'`)
	require.NoError(t, err)
	known := map[string]bool{}
	for rows.Next() {
		var key, state, effect string
		require.NoError(t, rows.Scan(&key, &state, &effect))
		known[workflow.IdempotencyKey(key)] = true
		jobs++
		require.Equal(t, "succeeded", state, "workflow %s", key)
		got := tool.EffectsFor(workflow.IdempotencyKey(key))
		require.Len(t, got, 1, "workflow %s made exactly one effect", key)
		require.Equal(t, got[0].ID, effect, "workflow %s's result names its effect", key)
	}
	require.NoError(t, rows.Err())
	for _, e := range tool.Effects() {
		if !known[e.Key] {
			orphans = append(orphans, e.Key)
		}
	}
	return jobs, orphans
}
