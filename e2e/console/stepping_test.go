package console_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/httpx"
	"github.com/fencelab/fencelab/e2e/e2etest"
)

// startStepping opens the points chapter and starts a stepping session of
// points/concurrent-debits' version variant from its "Step it by hand"
// form, and waits for the session's page with both actors at a step.
func (b *tab) startStepping(variant string) string {
	b.t.Helper()
	b.open("/console/chapters/points")
	sel := `#variant-exp-points--concurrent-debits`
	b.waitFor(`document.querySelector(`+fmt.Sprintf("%q", sel)+`)`, 20*time.Second)
	b.fill(sel, variant)
	// The session starts a deployable on a scratch database (the lab's
	// cluster is provisioned on first use): minutes on a loaded machine.
	b.submit(`button.step-start[data-experiment="points/concurrent-debits"]`,
		`location.pathname.startsWith("/console/stepping/") && document.querySelectorAll("li.actor[data-state=waiting]").length === 2`, 4*time.Minute)
	return b.path()
}

// stepActor clicks "Run <actor>'s next step" and waits for the page after
// it: the schedule grown by that actor.
func (b *tab) stepActor(actor, scheduleAfter string) {
	b.t.Helper()
	b.submit(fmt.Sprintf(`button.step[data-actor=%q]`, actor),
		fmt.Sprintf(`document.querySelector("#schedule") && document.querySelector("#schedule").textContent === %q`, scheduleAfter), 2*time.Minute)
}

// A reader steps points/concurrent-debits by hand: the naive version in
// the order the explorer finds first to break it (A reads, A debits, B
// reads the old balance, A commits, B debits, B commits) — each step
// lands in the timeline, the invariants are shown after every step, and
// at the end the page says caught, with PTS-I1's row, and the command
// that replays the schedule. Then the guarded version, where B's debit
// waits on the row A's uncommitted debit locked: the page shows B
// blocked, waiting on A, with no button for B, until A commits.
func TestConsoleStepsAnExperimentByHand(t *testing.T) {
	a := e2etest.Start(t, e2etest.Options{})
	b := newTabWithin(t, a.URL, 15*time.Minute)
	b.signIn(a.Token(t, admin, httpx.RoleAdmin))

	page := b.startStepping("naive")
	require.Regexp(t, `^/console/stepping/[0-9a-f]{32}$`, page)
	require.Contains(t, b.text("h1"), "(naive)")
	require.Equal(t, "read", b.text(`li.actor[data-actor="A"] em`), "A's next step is its first")
	require.Equal(t, 1, eval[int](b, `document.querySelectorAll('section.invariant[data-invariant="PTS-I1"][data-status="green"]').length`),
		"the invariants are evaluated before the first step")

	schedule := []string{"A", "A", "B", "A", "B", "B"}
	for i, actor := range schedule {
		b.stepActor(actor, strings.Join(schedule[:i+1], ","))
		steps := b.text("#steps")
		require.Contains(t, steps, fmt.Sprintf("choice %d,", i+1), "step %d is in the timeline", i+1)
		require.Positive(t, eval[int](b, `document.querySelectorAll('section.invariant[data-invariant="PTS-I1"]').length`),
			"the invariants after step %d", i+1)
		if i < len(schedule)-1 {
			require.Equal(t, "false", eval[string](b, `document.querySelector("#stepping-state").dataset.done`))
		}
	}
	steps := b.text("#steps")
	require.Contains(t, steps, "read balance 40", "B read the balance A had not committed yet")
	require.Contains(t, steps, "balance -20")
	b.waitFor(`document.querySelector("#stepping-verdict")`, 10*time.Second)
	require.Equal(t, "caught", eval[string](b, `document.querySelector("#stepping-verdict").dataset.verdict`))
	require.Contains(t, b.text("#stepping-verdict"), "Caught: PTS-I1")
	require.Equal(t, "fencelab lab run points/concurrent-debits --naive --schedule A,A,B,A,B,B", b.text("#replay"))
	require.Equal(t, 1, eval[int](b, `document.querySelectorAll('section.invariant[data-invariant="PTS-I1"][data-status="red"]').length`))
	require.Contains(t, b.text(`section.invariant[data-invariant="PTS-I1"]`), "-20")
	require.Zero(t, eval[int](b, `document.querySelectorAll("button.step").length`), "every actor finished")

	// One session per admin: a second start is refused with a link to it.
	b.open("/console/chapters/points")
	b.submit(`button.step-start[data-experiment="points/concurrent-debits"]`, `document.querySelector("#problem-link")`, time.Minute)
	require.Contains(t, b.text("h1"), "409")
	require.Equal(t, page, eval[string](b, `document.querySelector("#problem-link").getAttribute("href")`))

	// Ending it removes it: its page is a 404.
	b.open(page)
	b.submit("#end-session", `location.pathname === "/console/chapters/points"`, time.Minute)
	b.open(page)
	require.Contains(t, b.text("h1"), "404")

	// Guarded: A reads and debits (its UPDATE locks the row), B reads, and
	// B's debit waits on A's lock: B is shown blocked, on A.
	page = b.startStepping("guarded")
	for i, actor := range []string{"A", "A", "B", "B"} {
		b.stepActor(actor, strings.Join([]string{"A", "A", "B", "B"}[:i+1], ","))
	}
	require.Equal(t, "blocked", eval[string](b, `document.querySelector('li.actor[data-actor="B"]').dataset.state`))
	require.Equal(t, "A", eval[string](b, `document.querySelector('li.actor[data-actor="B"]').dataset.waitsOn`))
	require.Contains(t, b.text(`li.actor[data-actor="B"]`), "waits on A")
	require.Zero(t, eval[int](b, `document.querySelectorAll('button.step[data-actor="B"]').length`), "a blocked actor cannot be released")
	require.Equal(t, "commit", b.text(`li.actor[data-actor="A"] em`))
	// A commits: B is granted the lock, its debit re-checks the committed
	// balance and is refused, and B waits at its commit.
	b.stepActor("A", "A,A,B,B,A")
	require.Equal(t, "waiting", eval[string](b, `document.querySelector('li.actor[data-actor="B"]').dataset.state`))
	require.Contains(t, b.text("#steps"), "insufficient balance")
	b.stepActor("B", "A,A,B,B,A,B")
	require.Equal(t, "holds", eval[string](b, `document.querySelector("#stepping-verdict").dataset.verdict`))
	require.Equal(t, "fencelab lab run points/concurrent-debits --schedule A,A,B,B,A,B", b.text("#replay"))
	b.submit("#end-session", `location.pathname === "/console/chapters/points"`, time.Minute)
}
