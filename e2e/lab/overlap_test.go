package lab_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	claimlab "github.com/fencelab/fencelab/lab/claim"
	"github.com/fencelab/fencelab/program"
)

// saysAtOnce matches a claim that depends on actors being in the critical
// section at the same time.
var saysAtOnce = regexp.MustCompile(`(?i)concurren|at once|\brac(e|es|ing)\b`)

// Every experiment whose claim says "concurrent", "at once" or "race"
// declares Overlap, so its guarded run fails with "no overlap observed"
// unless it saw a lock wait, overlapping database time or a pause point
// reached by both (core/lab's runner enforces it; core/lab's
// TestASerialRunOfAnAtOnceClaimFails proves a serial run fails). The
// chapter's headline figure is run here too.
func TestEveryConcurrentClaimObservesAnOverlap(t *testing.T) {
	var listed []string
	for _, e := range program.Experiments() {
		if !saysAtOnce.MatchString(e.Claim) {
			continue
		}
		listed = append(listed, e.ID)
		if !e.Overlap {
			t.Errorf("%s claims %q but does not declare Overlap: its run would pass serial", e.ID, e.Claim)
		}
	}
	if len(listed) < 2 {
		t.Fatalf("only %v claim an overlap: the match is broken", listed)
	}
	t.Logf("claims that need an overlap (%d): %s", len(listed), strings.Join(listed, ", "))
	x := lab.NewX(t, e2etest.Env)
	claimlab.TwoProcesses.Run(x)
	var seen bool
	for _, s := range x.Steps() {
		seen = seen || (s.Actor == "db" && strings.HasPrefix(s.Action, "overlap:") && !s.DBTime.IsZero())
	}
	if !seen {
		t.Fatalf("claim/two-processes held without an overlap step: %+v", x.Steps())
	}
}

// claim/two-processes' timeline carries the database's time on every step
// whose actor touched the database, and those times follow the commit
// order: enqueue, the lab's lock, both claim statements in flight, the
// release, the winner's claim, its completion.
func TestTimelineStepsCarryDatabaseTime(t *testing.T) {
	x := lab.NewX(t, e2etest.Env)
	claimlab.TwoProcesses.Run(x)
	steps := x.Steps()
	var (
		enqueued, locked, released, claimed, done time.Time
		waits                                     []time.Time
	)
	for _, s := range steps {
		touched := s.Actor == "db" || s.Actor == "client" || s.Outcome == lab.Accepted || s.Outcome == "waiting" ||
			s.Outcome == "succeeded" || strings.Contains(s.Action, "lock")
		if touched && s.DBTime.IsZero() {
			t.Errorf("a step that touched the database has no database time: %s", lab.FormatStep(s, steps[0].At))
		}
		switch {
		case strings.HasPrefix(s.Action, "enqueue"):
			enqueued = s.DBTime
		case strings.HasPrefix(s.Action, "hold a SHARE lock"):
			locked = s.DBTime
		case s.Outcome == "waiting":
			waits = append(waits, s.DBTime)
		case strings.HasPrefix(s.Action, "release the lock"):
			released = s.DBTime
		case strings.HasPrefix(s.Action, "claim job"):
			claimed = s.DBTime
		case s.Outcome == "succeeded":
			done = s.DBTime
		}
	}
	if len(waits) != 2 {
		t.Fatalf("want both processes' claim statements in flight, got %d", len(waits))
	}
	order := []time.Time{enqueued, locked, waits[0], released, claimed, done}
	if waits[1].After(waits[0]) {
		order[2] = waits[1]
	}
	for i := 1; i < len(order); i++ {
		if order[i].Before(order[i-1]) {
			t.Errorf("database times out of commit order at %d: %v", i, order)
		}
	}
}
