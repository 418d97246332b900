package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/program"
)

// uncaught is a broken experiment on purpose: its naive version writes
// nothing, so the invariant it names as its catch holds.
var uncaught = lab.Experiment{
	ID:         "lease/toy-uncaught",
	Claim:      "a toy whose naive version breaks nothing",
	Invariants: []string{"CORE-I0"},
	Naive:      "does nothing at all",
	Catches:    []string{"CORE-I0"},
	Run: func(x *lab.X) {
		x.Database()
		x.Say("toy", "write nothing")
	},
}

// A naive run that is not caught is a broken experiment: exit 3 (not 1,
// which says "caught as predicted", nor 0), with the same verdict in --json.
func TestANaiveRunThatIsNotCaughtExitsThree(t *testing.T) {
	saved := labExperiments
	labExperiments = func() []lab.Experiment { return []lab.Experiment{uncaught} }
	t.Cleanup(func() { labExperiments = saved })

	var out bytes.Buffer
	err := labRunTo(&out, []string{uncaught.ID, "--naive", "--json"})
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("lab run --naive of an uncaught experiment returned %v, want exit 3; output:\n%s", err, out.String())
	}
	var res lab.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if res.Verdict != lab.NotCaught || res.Exit != 3 || res.Caught || len(res.Timeline) != 1 {
		t.Fatalf("--json verdict %q exit %d caught %v timeline %v", res.Verdict, res.Exit, res.Caught, res.Timeline)
	}

	// Asking for a control the experiment does not declare is a usage
	// mistake (2), found before any database is made.
	if err := labRunTo(&out, []string{uncaught.ID, "--control"}); !errors.Is(err, errUsage) {
		t.Fatalf("--control without a control returned %v, want usage (exit 2)", err)
	}
}

// What catches a naive run is a row of data: an experiment that names a
// schema invariant (or an unknown ID) among its Catches could never be
// caught (core/lab ignores schema findings when it judges a run).
func TestCatchesAreDataInvariants(t *testing.T) {
	t.Parallel()
	kind := map[string]bool{} // ID → schema
	for _, inv := range program.Invariants().All() {
		kind[inv.ID] = inv.Schema
	}
	for _, e := range program.Experiments() {
		for _, c := range e.Catches {
			schema, ok := kind[c]
			switch {
			case !ok:
				t.Errorf("%s catches %s, which is not a registered invariant ID", e.ID, c)
			case schema:
				t.Errorf("%s catches %s, a schema invariant: a naive run is caught by the data it wrote", e.ID, c)
			}
		}
		if e.Control != "" && e.Naive == "" {
			t.Errorf("%s declares a control but no naive version", e.ID)
		}
	}
}

// lab explore refuses, before any database is made, what it cannot
// explore: an experiment without actors, both variants at once.
func TestLabExploreUsage(t *testing.T) {
	saved := labExperiments
	labExperiments = func() []lab.Experiment { return []lab.Experiment{uncaught} }
	t.Cleanup(func() { labExperiments = saved })
	var out bytes.Buffer
	for _, args := range [][]string{
		{uncaught.ID},                         // declares no actors
		{"lease/no-such-experiment"},          // unknown
		{uncaught.ID, "--naive", "--control"}, // one variant at a time
		{},
	} {
		if err := labExploreTo(&out, args); !errors.Is(err, errUsage) {
			t.Errorf("lab explore %v: %v, want usage (exit 2)", args, err)
		}
	}
	if err := labRunTo(&out, []string{uncaught.ID, "--schedule", "A,B"}); !errors.Is(err, errUsage) {
		t.Errorf("lab run --schedule of an experiment without actors: %v, want usage", err)
	}
}
