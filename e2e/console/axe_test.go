package console_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// EnvConsoleShots names a directory where TestConsolePagesPassAxe saves a
// screenshot of every page it checks (to look at them as a reader would).
const EnvConsoleShots = "FENCELAB_CONSOLE_SHOTS"

// axeSource is axe-core's browser bundle, from the pinned npm tools
// (tools/npm/package.json).
func axeSource(t *testing.T) string {
	t.Helper()
	// go test runs a package's tests in its directory: the repository's
	// root is two levels up (a path from runtime.Caller would not do: ./test
	// builds with -trimpath).
	p := filepath.Join("..", "..", "tools", "npm", "node_modules", "axe-core", "axe.min.js")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the accessibility check needs axe-core (%v): install the pinned npm tools with `npm ci --prefix tools/npm` from the repository's root", err)
	}
	return string(b)
}

type axeNode struct {
	Target         []any  `json:"target"`
	HTML           string `json:"html"`
	FailureSummary string `json:"failureSummary"`
}

type axeRule struct {
	ID     string    `json:"id"`
	Impact string    `json:"impact"`
	Help   string    `json:"help"`
	Nodes  []axeNode `json:"nodes"`
}

type axeResults struct {
	Violations []axeRule `json:"violations"`
	Incomplete []axeRule `json:"incomplete"`
}

// axe runs axe-core on the tab's page, in the Chromium the console tests
// drive, and returns what fails: every violation, and every colour-contrast
// check axe could not decide ("needs review": a reader may not be able to
// read it either).
func (b *tab) axe(src string) []string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	// Injected over the DevTools protocol: the console's CSP allows no
	// script, and the page must be checked as served.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](src+";true")); err != nil {
		b.t.Fatalf("inject axe-core: %v", err)
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[axeResults](`axe.run(document, {resultTypes: ["violations", "incomplete"]})`, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("run axe: %v", err)
	}
	var out []string
	describe := func(kind string, r axeRule) {
		var nodes []string
		for i, n := range r.Nodes {
			if i == 5 {
				nodes = append(nodes, fmt.Sprintf("… %d more", len(r.Nodes)-5))
				break
			}
			nodes = append(nodes, fmt.Sprintf("%v %s", n.Target, strings.ReplaceAll(n.FailureSummary, "\n", " ")))
		}
		out = append(out, fmt.Sprintf("%s %s (%s, %d nodes): %s\n    %s", kind, r.ID, r.Impact, len(r.Nodes), r.Help, strings.Join(nodes, "\n    ")))
	}
	for _, r := range res.Violations {
		describe("violation", r)
	}
	for _, r := range res.Incomplete {
		if r.ID == "color-contrast" {
			describe("needs review", r)
		}
	}
	return out
}

// Every console page, signed out, as a user and as an admin — the
// chapters, a finished run's page, the operator's pages with rows on them,
// the sign-in form and an error page — passes axe-core with no violation
// and no colour contrast left for review.
//
// Not parallel: its lab run would share two cores with the run test's,
// and a run starved of CPU meets the write limiter's 2 s wait (503
// overloaded) and does not hold its prediction.
func TestConsolePagesPassAxe(t *testing.T) {
	src := axeSource(t)
	a := e2etest.Start(t, e2etest.Options{})
	b := newTabWithin(t, a.URL, 20*time.Minute)
	ctx := context.Background()
	tok := a.Token(t, admin, httpx.RoleAdmin)

	// Rows for the operator's pages: a workflow job waiting for review.
	jobID := startWorkflow(t, a, tok, "wf-axe-1")
	_, err := a.Pool.Exec(ctx, `UPDATE job SET state = 'needs_review', attempts = 1, fence = 1, last_error = 'the tool neither answered nor can be asked' WHERE id = $1`, jobID)
	require.NoError(t, err)

	// A run, started first: its page is checked once both versions are done.
	b.signIn(tok)
	b.open("/console/chapters/points")
	b.submit(`button.run[data-experiment="points/concurrent-debits"]`, `location.pathname.startsWith("/console/runs/")`, 30*time.Second)
	runPage := b.path()

	var failures []string
	check := func(who, path string) {
		t.Helper()
		b.open(path)
		b.waitFor(`document.querySelector("main")`, 20*time.Second)
		if dir := os.Getenv(EnvConsoleShots); dir != "" {
			b.screenshot(filepath.Join(dir, strings.ReplaceAll(who, " ", "-")+strings.NewReplacer("/", "_").Replace(path)+".png"))
		}
		for _, f := range b.axe(src) {
			failures = append(failures, fmt.Sprintf("%s %s: %s", who, path, f))
		}
	}

	b.waitFor(`document.querySelector("#run-state") && document.querySelector("#run-state").dataset.state === "done"`, 4*time.Minute)
	// A stepping session, started once the run is done (not beside it on
	// two cores), stepped until B is blocked on A's lock: the page with
	// waiting, blocked and finished-step markup all on it.
	stepPage := b.startStepping("guarded")
	for i, actor := range []string{"A", "A", "B", "B"} {
		b.stepActor(actor, strings.Join([]string{"A", "A", "B", "B"}[:i+1], ","))
	}
	admPages := []string{"/", "/console/chapters/points", "/console/chapters/failover", "/console/chapters/foundation", runPage, stepPage,
		"/console/queue", fmt.Sprintf("/console/jobs/%d", jobID), "/console/inbox", "/console/outbox", "/console/admission"}
	for _, p := range admPages {
		check("admin", p)
	}

	// Signed out: every chapter, the run's page, the sign-in form, an error.
	b.submit("#signout", `location.pathname === "/console/signin"`, 10*time.Second)
	check("signed out", "/console/signin")
	check("signed out", "/")
	for _, ch := range lab.Chapters {
		check("signed out", "/console/chapters/"+ch.Slug)
	}
	check("signed out", runPage)
	check("signed out", "/console/chapters/no-such-chapter")

	// A user: the chapters, and the refusal of an operator's page.
	b.signIn(a.Token(t, user, httpx.RoleUser))
	check("user", "/")
	check("user", "/console/chapters/points")
	check("user", "/console/queue")

	require.Empty(t, failures, "axe-core:\n%s", strings.Join(failures, "\n"))
}
