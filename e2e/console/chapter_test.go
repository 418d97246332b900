package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

// A reader who has no token opens a chapter and reads the book: its text,
// each experiment's Run button right after the heading that names it,
// each invariant's live status after its heading.
func TestConsoleRendersTheChapterText(t *testing.T) {
	a := e2etest.StartParallel(t, e2etest.Options{})
	c := newClient(t, a.URL)

	status, page, _ := c.do(http.MethodGet, "/console/chapters/points", nil, nil)
	require.Equal(t, http.StatusOK, status)
	start := strings.Index(page, `<article class="book" id="text">`)
	require.GreaterOrEqual(t, start, 0, "the chapter's text is on the page")
	text := page[start : start+strings.Index(page[start:], "</article>")]
	// Words of docs/chapters/05-points.md, rendered from its Markdown.
	has := func(sub, msg string) {
		t.Helper()
		require.True(t, strings.Contains(text, sub), "%s: the text has no %q", msg, sub)
	}
	has("<strong>The claim.</strong> Concurrent debits never overdraw an account", "the chapter's first words")
	has("<h2>How it works</h2>", "its headings")
	has("<table>", "its tables")
	require.False(t, strings.Contains(text, "<script"), "no script")
	require.Contains(t, page, `id="signed-out"`, "the page says what a signed-out reader can do")

	var points []string
	for _, e := range program.Experiments() {
		if strings.HasPrefix(e.ID, "points/") {
			points = append(points, e.ID)
		}
	}
	require.NotEmpty(t, points)
	last := 0
	for _, id := range points {
		// The heading that names the experiment, then its run block with the
		// Run button before anything else of the text.
		h := strings.Index(text, ` id="exp-`+strings.ReplaceAll(id, "/", "--")+`"><code>`)
		require.Greater(t, h, last, "%s: its heading, in the text's order", id)
		next := strings.Index(text[h+1:], "<h")
		block := text[h:]
		if next >= 0 {
			block = text[h : h+1+next]
		}
		require.True(t, strings.Contains(block, `<button type="submit" class="run" data-experiment="`+id+`">`), "%s: a Run button beside the text's mention", id)
		require.True(t, strings.Contains(block, `action="/console/signin"`), "%s: signed out, running starts with signing in as admin", id)
		last = h
	}
	// Every experiment says its naive version or why it has none, and
	// every naive version its control or that it has none; the Run block
	// runs the control too.
	require.Equal(t, len(points), strings.Count(text, "<strong>Naive version:</strong>")+strings.Count(text, "<strong>No naive version:</strong>"))
	naive := 0
	for _, e := range program.Experiments() {
		if strings.HasPrefix(e.ID, "points/") && e.Naive != "" {
			naive++
		}
		if e.ID == "points/corrupted-balance" {
			require.NotEmpty(t, e.NoNaive)
			require.True(t, strings.Contains(text, e.NoNaive), "points/corrupted-balance says why it has no naive version")
		}
	}
	require.Equal(t, naive, strings.Count(text, "<strong>Control:</strong>")+strings.Count(text, "<strong>No control:</strong>"))
	require.True(t, strings.Contains(text, `data-experiment="points/concurrent-debits">Run it, its naive version and the control: sign in as admin</button>`))
	// The invariants: data invariants apart from schema facts.
	data, schema := strings.Index(page, `id="data-invariants"`), strings.Index(page, `id="schema-invariants"`)
	require.Greater(t, data, 0)
	require.Greater(t, schema, data)
	require.Greater(t, strings.Index(page, `id="PTS-I1" data-invariant="PTS-I1" data-kind="data"`), data)
	require.Less(t, strings.Index(page, `id="PTS-I1" data-invariant="PTS-I1"`), schema)
	require.Greater(t, strings.Index(page, `id="PTS-S1" data-invariant="PTS-S1" data-kind="schema"`), schema)
	// The invariants' live status sits under their headings.
	require.Regexp(t, regexp.MustCompile(`<h[2-6] id="text-PTS-I4">[^<]*PTS-I4[\s\S]*?data-invariant-status="PTS-I4"`), text)

	// Signed in as admin, the same buttons start a run.
	c2 := newClient(t, a.URL)
	c2.signIn(a.Token(t, admin, httpx.RoleAdmin))
	_, page, _ = c2.do(http.MethodGet, "/console/chapters/points", nil, nil)
	require.True(t, strings.Contains(page, `action="/console/experiments/run"`), "an admin's Run buttons start runs")
	require.False(t, strings.Contains(page, `id="signed-out"`))

	// Chapter 14 shows its experiments (they need a whole cluster).
	_, page, _ = c.do(http.MethodGet, "/console/chapters/failover", nil, nil)
	require.Contains(t, page, "TestFailoverWithSyncStandbyKeepsEveryAcknowledgedWrite")
	require.Contains(t, page, `data-cluster-test="TestKilledReplicaRetriesLandOnce"`)

	// The chapter list links every experiment and says what CORE-I0 is.
	status, page, _ = c.do(http.MethodGet, "/console", nil, nil)
	require.Equal(t, http.StatusOK, status)
	for _, e := range program.Experiments() {
		slug, _, _ := strings.Cut(e.ID, "/")
		require.True(t, strings.Contains(page, `href="/console/chapters/`+slug+`#exp-`+strings.ReplaceAll(e.ID, "/", "--")+`"`), "the chapter list links %s", e.ID)
	}
	require.Contains(t, page, "CORE-I0: the schema is whole")

	// Every browser asks for /favicon.ico; it is a small embedded icon.
	status, icon, h := c.do(http.MethodGet, "/favicon.ico", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "image/x-icon", h.Get("Content-Type"))
	require.True(t, strings.HasPrefix(icon, "\x00\x00\x01\x00"), "an ICO file")
	require.Less(t, len(icon), 4096)
	require.Contains(t, page, "names its chapter and its number", "invariant IDs are explained in the text")
}
