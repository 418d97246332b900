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

// A run of 100 debitors beside a few other actors (points/concurrent-debits
// draws 103) gets a lane per actor, each labelled with its name and holding
// exactly that actor's markers: no actor is folded away.
func TestConsoleDrawsEveryActor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	res := &lab.Result{ID: "points/concurrent-debits", Started: t0}
	res.Timeline = append(res.Timeline, lab.Step{Actor: "setup", At: t0, Action: "open acct-0042 with 1000"})
	want := map[string]int{"setup": 1}
	for i := 1; i <= 100; i++ {
		a := fmt.Sprintf("client-%03d", i)
		out := lab.Refused
		if i%3 == 0 {
			out = lab.Accepted
		}
		res.Timeline = append(res.Timeline, lab.Step{Actor: a, At: t0.Add(time.Duration(i) * time.Millisecond), Action: "debit 30", Outcome: out, Fence: int64(i)})
		want[a]++
	}
	for _, a := range []string{"checker", "a-very-long-actor-name-that-is-truncated"} {
		res.Timeline = append(res.Timeline, lab.Step{Actor: a, At: t0.Add(200 * time.Millisecond), Action: "read", Outcome: lab.Violates})
		want[a]++
	}
	html := string(swimlane(res))

	lanes := regexp.MustCompile(`<div class="lane" data-actor="([^"]+)"><span class="actor" title="([^"]+)">`).FindAllStringSubmatch(html, -1)
	require.Len(t, lanes, 103, "one lane per actor")
	require.Contains(t, html, `data-actors="103"`)
	parts := strings.Split(html, `<div class="lane" data-actor="`)[1:]
	for i, l := range lanes {
		require.Equal(t, l[1], l[2], "the full name is the label's title")
		markers := strings.Count(parts[i], `class="step `)
		require.Equal(t, want[l[1]], markers, "%s: its own steps in its lane", l[1])
		delete(want, l[1])
	}
	require.Empty(t, want, "every actor drawn")
	// Outcomes differ by shape, not only colour.
	require.Contains(t, html, `class="step refused" data-outcome="refused"><title>`)
	require.Regexp(t, `class="step refused" data-outcome="refused"><title>[^<]*</title><rect `, html, "refused: a (hollow) square")
	require.Regexp(t, `class="step violates" data-outcome="violates"><title>[^<]*</title><path d="M0 4 L7 17 L-7 17 Z"/>`, html, "violates: a triangle")
	require.Regexp(t, `class="step ok" data-outcome="accepted"><title>[^<]*</title><circle `, html, "accepted: a circle")
	// No text is drawn inside the pictures: labels are HTML.
	require.NotContains(t, html, "<text")
	require.NotContains(t, string(chart("c", []time.Time{t0, t0.Add(time.Second)}, series{"a", "s1", []float64{1, 2}})), "<text")
}

// Rows that state a fact about the schema are told from data rows.
func TestSchemaFactsAreToldFromDataRows(t *testing.T) {
	t.Parallel()
	require.True(t, schemaFact([]string{"balance_non_negative constraint missing or not validated", "points_account", "—"}))
	require.True(t, schemaFact([]string{"append-only trigger missing or not always enabled", "points_ledger_entry"}))
	require.False(t, schemaFact([]string{"negative balance", "acct-0042", "-20"}))
	require.False(t, schemaFact(nil))
}

// The queue chart's waiting series is red only while jobs wait for a
// person: a chart is not an alarm when nothing is wrong.
func TestTheQueueChartIsRedOnlyWhenJobsWait(t *testing.T) {
	t.Parallel()
	require.Equal(t, "s3", waitingClass(nil))
	require.Equal(t, "s3", waitingClass([]float64{3, 1, 0}), "they waited earlier, none now")
	require.Equal(t, "trouble", waitingClass([]float64{0, 0, 2}))
}
