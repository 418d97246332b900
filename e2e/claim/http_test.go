package claim_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/services/ops"
	"github.com/fencelab/fencelab/services/workflow"
)

// POST /workflows starts a run (idempotent per business key); GET /jobs/{id}
// shows the job and its history to admins, and refuses everything else with
// the right 4xx.
func TestWorkflowRunIsVisibleToAdminsWithItsHistory(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	admin := a.Token(t, "admin-0001", httpx.RoleAdmin)
	user := a.Token(t, "user-0042", httpx.RoleUser)

	r := a.Do(t, e2etest.Req{Method: "POST", Path: "/workflows", Token: admin, Body: map[string]any{"business_key": "wf-0100", "input": map[string]string{"report": "daily"}}})
	require.Equal(t, 202, r.Status, string(r.Body))
	var started workflow.StartResponse
	r.JSON(t, &started)
	require.True(t, started.Created)
	r = a.Do(t, e2etest.Req{Method: "POST", Path: "/workflows", Token: admin, Body: map[string]any{"business_key": "wf-0100"}})
	require.Equal(t, 200, r.Status, "the same business key is the same run")
	var again workflow.StartResponse
	r.JSON(t, &again)
	require.Equal(t, started.JobID, again.JobID)
	require.False(t, again.Created)

	for name, tc := range map[string]struct {
		token, body string
		status      int
		code        string
	}{
		"user role":      {user, `{"business_key":"wf-1"}`, 403, "forbidden"},
		"no token":       {"", `{"business_key":"wf-1"}`, 401, "unauthorized"},
		"bad key":        {admin, `{"business_key":"wf 1"}`, 422, "invalid_business_key"},
		"empty key":      {admin, `{"business_key":""}`, 422, "invalid_business_key"},
		"unknown field":  {admin, `{"business_key":"wf-1","owner":"me"}`, 400, "unknown_field"},
		"malformed":      {admin, `{"business_key":`, 400, "malformed_json"},
		"input too long": {admin, `{"business_key":"wf-1","input":"` + strings.Repeat("x", 20000) + `"}`, 422, "input_too_large"},
	} {
		r := a.Do(t, e2etest.Req{Method: "POST", Path: "/workflows", Token: tc.token, Body: tc.body, Invalid: true})
		require.Equal(t, tc.status, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, tc.code, r.Code(), name)
	}

	// Run it by hand through the app's own claim engine and tool.
	ctx := context.Background()
	jobs, err := a.Deps.Jobs.Claim(ctx, claim.ClaimParams{Kinds: []string{workflow.KindName}})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, a.Deps.Jobs.Execute(ctx, jobs[0]))

	r = a.Do(t, e2etest.Req{Method: "GET", Path: started.Job, Token: admin})
	require.Equal(t, 200, r.Status, string(r.Body))
	var view ops.JobView
	r.JSON(t, &view)
	require.Equal(t, claim.StateSucceeded, view.Job.State)
	require.Equal(t, "wf-0100", view.Job.BusinessKey)
	require.JSONEq(t, `{"input":{"report":"daily"}}`, string(view.Job.Payload))
	require.Len(t, view.Events, 2)
	require.Equal(t, claim.EvClaimed, view.Events[0].Event)
	require.Equal(t, claim.EvSucceeded, view.Events[1].Event)
	require.Equal(t, view.Job.Fence, view.Events[1].Fence)

	for name, tc := range map[string]struct {
		path, token string
		status      int
		code        string
	}{
		"user role":  {started.Job, user, 403, "forbidden"},
		"no token":   {started.Job, "", 401, "unauthorized"},
		"not a num":  {"/jobs/abc", admin, 400, "invalid_id"},
		"zero":       {"/jobs/0", admin, 400, "invalid_id"},
		"negative":   {"/jobs/-4", admin, 400, "invalid_id"},
		"overflow":   {"/jobs/99999999999999999999", admin, 400, "invalid_id"},
		"float":      {"/jobs/1.5", admin, 400, "invalid_id"},
		"no such id": {"/jobs/987654", admin, 404, "job_not_found"},
	} {
		r := a.Do(t, e2etest.Req{Method: "GET", Path: tc.path, Token: tc.token, Invalid: true})
		require.Equal(t, tc.status, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, tc.code, r.Code(), name)
	}

	// The queue metrics come from the database at scrape time.
	_, _, err = a.Deps.Jobs.Enqueue(ctx, a.Pool, claim.NewJob{Kind: workflow.KindName, BusinessKey: "wf-0101"})
	require.NoError(t, err)
	m := string(a.Do(t, e2etest.Req{Method: "GET", Path: "/metrics"}).Body)
	require.Contains(t, m, `fencelab_claim_queue_depth{kind="workflow",state="ready"} 1`)
	require.Contains(t, m, `fencelab_claim_oldest_ready_age_seconds{kind="workflow"}`)
	require.Contains(t, m, `fencelab_claim_claims_total{kind="workflow"} 1`)
	require.Contains(t, m, `fencelab_claim_outcomes_total{kind="workflow",outcome="succeeded"} 1`)
	e2etest.Assert(t, a.Pool, "claim")
}
