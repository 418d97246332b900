package console

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lab"
)

// A naive run with a control: the run page draws the guarded, the naive
// and the control timelines, each with its verdict in words, the control
// beside the naive run (the reader sees the same naive code hold without
// the race), and the naive schema the version sets up as a schema fact,
// apart from the data rows that caught it.
func TestConsoleDrawsTheControlBesideTheNaiveRun(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := lab.Experiment{ID: "points/concurrent-debits", Claim: "concurrent debits never overdraw",
		Naive: "read, check in Go, subtract", Catches: []string{"PTS-I1"},
		Control: "the same read-check-subtract by one client"}
	debits := func(clients int, out string) []lab.Step {
		s := []lab.Step{{Actor: "setup", At: t0, Action: "open acct-0042 with 1000"}}
		for i := 1; i <= clients; i++ {
			s = append(s, lab.Step{Actor: fmt.Sprintf("client-%03d", i), At: t0.Add(time.Duration(i) * time.Millisecond), Action: "debit 30", Outcome: out})
		}
		return s
	}
	ok := lab.InvariantView{ID: "PTS-I1", Statement: "no balance is negative", Holds: true}
	guarded := &lab.Result{ID: e.ID, Variant: "guarded", Started: t0, Timeline: debits(100, lab.Accepted),
		Invariants: []lab.InvariantView{ok}, Holds: true, Verdict: lab.Held}
	naive := &lab.Result{ID: e.ID, Variant: "naive", Naive: true, Catches: e.Catches, Started: t0, Timeline: debits(100, lab.Violates),
		Invariants: []lab.InvariantView{
			{ID: "PTS-I1", Statement: "no balance is negative", Columns: []string{"account", "balance"}, Rows: [][]any{{"acct-0042", -1970}}},
			{ID: "PTS-S1", Statement: "the points guards are in the schema", Schema: true, Columns: []string{"problem"}, Rows: [][]any{{"CHECK (balance >= 0) constraint missing"}}},
		}, Caught: true, Verdict: lab.Caught}
	control := &lab.Result{ID: e.ID, Variant: "control", Naive: true, Control: true, Catches: e.Catches, Started: t0, Timeline: debits(1, lab.Accepted),
		Invariants: []lab.InvariantView{ok,
			{ID: "PTS-S1", Statement: "the points guards are in the schema", Schema: true, Columns: []string{"problem"}, Rows: [][]any{{"CHECK (balance >= 0) constraint missing"}}},
		}, Holds: true, Verdict: lab.Held}
	ru := &run{N: 7, Exp: e, By: "admin-0001", Queued: t0, state: "done", guarded: guarded, naive: naive, control: control}

	pages, err := parsePages()
	require.NoError(t, err)
	data := runPageData(ru)
	data["Path"] = "/console/runs/7"
	var b strings.Builder
	require.NoError(t, pages["run.html"].t.Execute(&b, data))
	page := b.String()

	section := func(kind string) string {
		t.Helper()
		i := strings.Index(page, `<section class="version" id="`+kind+`">`)
		require.GreaterOrEqual(t, i, 0, "the %s version has its section", kind)
		j := strings.Index(page[i:], "</section>")
		require.Greater(t, j, 0)
		return page[i : i+j]
	}
	g, n, c := section("guarded"), section("naive"), section("control")
	// The control's section comes right after the naive run's, in the
	// same row of versions: beside it.
	require.Less(t, strings.Index(page, `id="naive"`), strings.Index(page, `id="control"`))
	require.Contains(t, page, `<div class="versions three">`)
	require.Contains(t, page, `id="control-note"`)

	actors := regexp.MustCompile(`<div class="swimlane" data-actors="(\d+)"`)
	for kind, want := range map[string]string{"guarded": "101", "naive": "101", "control": "2"} {
		m := actors.FindStringSubmatch(map[string]string{"guarded": g, "naive": n, "control": c}[kind])
		require.NotNil(t, m, "%s: its timeline is drawn", kind)
		require.Equal(t, want, m[1], "%s: a lane per actor", kind)
	}
	require.Equal(t, 100, strings.Count(n, `data-outcome="violates"`), "the naive run's unguarded debits")
	require.Zero(t, strings.Count(c, `data-outcome="violates"`), "the control's one debit violates nothing")

	// Each verdict in words.
	require.Contains(t, g, `data-verdict="holds"`)
	require.Contains(t, g, "Holds: the prediction held")
	require.Contains(t, n, `data-verdict="caught"`)
	require.Contains(t, n, "Caught: PTS-I1 reports the data rows the naive timeline wrote")
	require.Contains(t, c, `data-verdict="holds"`)
	require.Contains(t, c, "does not break it: the interleaving does")
	require.Contains(t, c, "<h2>Control: the same read-check-subtract by one client</h2>")

	// The naive run's data rows apart from the schema fact its schema
	// invariant states; the schema invariant never appears as a catch.
	require.Contains(t, n, `<div class="invariant red" data-invariant="PTS-I1">`)
	require.Contains(t, n, "acct-0042")
	require.NotContains(t, n, `<div class="invariant red" data-invariant="PTS-S1">`)
	require.Contains(t, n, `data-schema-facts="naive"`)
	require.Contains(t, n, "CHECK (balance &gt;= 0) constraint missing")
	require.Contains(t, c, `data-schema-facts="control"`)

	// A naive run that was not caught, and a control that broke, say so.
	naive.Verdict, naive.Caught = lab.NotCaught, false
	control.Verdict, control.Holds = lab.Broke, false
	require.Contains(t, (&runView{R: naive}).Verdict(), "Not caught: no invariant among PTS-I1")
	require.Contains(t, (&runView{R: control}).Verdict(), "Broke: the control broke")
	require.Equal(t, "missed", (&runView{R: control}).VerdictClass())
}

// An experiment without a naive version says why in one line: its own
// reason, or the generic sentence; a naive version without a control says
// it has none.
func TestEveryExperimentSaysItsNaiveVersionOrWhyNot(t *testing.T) {
	t.Parallel()
	require.Equal(t, noNaive, noNaiveOf(lab.Experiment{ID: "x/y"}))
	require.Equal(t, "the fault is the corruption itself.", noNaiveOf(lab.Experiment{ID: "x/y", NoNaive: "the fault is the corruption itself"}))
	require.Equal(t, "it", runWhat(lab.Experiment{}))
	require.Equal(t, "it and its naive version", runWhat(lab.Experiment{Naive: "n"}))
	require.Equal(t, "it, its naive version and the control", runWhat(lab.Experiment{Naive: "n", Control: "c"}))
}
