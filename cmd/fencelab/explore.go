package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/lab"
)

func labExplore(args []string) error { return labExploreTo(os.Stdout, args) }

// labExploreTo is `fencelab lab explore ID [--naive|--control] [--json]
// [--max N] [--seed S]`: the experiment under every schedule of its actors.
func labExploreTo(out io.Writer, args []string) error {
	fs := newFlags("lab explore", "lab explore ID [--naive|--control] [--json] [--max N] [--seed S] [--parallel N] [--database-url URL]")
	naive := fs.Bool("naive", false, "explore the naive version: which schedules the invariant catches")
	control := fs.Bool("control", false, "explore the naive version's serial schedules (each actor runs to its end before the next): all must hold")
	asJSON := fs.Bool("json", false, "print the exploration as one JSON document")
	maxN := fs.Int("max", lab.DefaultMax, "run every schedule when there are at most this many orders of the actors' steps; above, sample this many")
	seed := fs.Int64("seed", 1, "seed of the sampling above --max")
	parallel := fs.Int("parallel", 2, "schedules run at once in an exhaustive exploration (each on its own database)")
	url := fs.String("database-url", "", "a PostgreSQL server to make scratch databases on (default: a throwaway local cluster)")
	timeout := fs.Duration("timeout", 15*time.Minute, "overall time limit")
	e, err := parseExperimentArgs(fs, args, "lab explore", "marks the explorable ones")
	if err != nil {
		return err
	}
	id := e.ID
	switch {
	case e.Explore == nil:
		fmt.Fprintf(os.Stderr, "fencelab lab explore: %s declares no actors to schedule; explorable: %s\n", id, strings.Join(explorable(), ", "))
		return errUsage
	case *naive && *control:
		fmt.Fprint(os.Stderr, "fencelab lab explore: --naive or --control, not both\n")
		return errUsage
	case *naive && e.Naive == "":
		fmt.Fprintf(os.Stderr, "fencelab lab explore: %s has no naive version\n", id)
		return errUsage
	case *control && e.Control == "":
		fmt.Fprintf(os.Stderr, "fencelab lab explore: %s has no control\n", id)
		return errUsage
	case *maxN < 1 || *parallel < 1 || *parallel > 16:
		fmt.Fprint(os.Stderr, "fencelab lab explore: --max must be at least 1, --parallel 1..16\n")
		return errUsage
	}
	v := lab.Guarded
	switch {
	case *naive:
		v = lab.Naive
	case *control:
		v = lab.Control
	}
	ctx, cluster, done, err := scratchCluster(*timeout, *url, id, *asJSON)
	if err != nil {
		return err
	}
	defer done()
	o := lab.ExploreOptions{Variant: v, Max: *maxN, Seed: *seed, Parallel: *parallel}
	if !*asJSON {
		fmt.Fprintf(out, "%s (%s) — %s\n", id, v, e.Explore.Claim)
		fmt.Fprintf(out, "actors: %s\n\n", actorLine(e.Explore.Actors))
		o.Progress = func(n int, s lab.ScheduleOutcome) {
			fmt.Fprintf(os.Stderr, "  … %d: %s %s (%.1fs)\n", n, s.Schedule, s.Outcome, s.Seconds)
		}
	}
	ex := lab.ExploreExperiment(ctx, e, cluster, o)
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ex); err != nil {
			return err
		}
	} else {
		printExploration(out, ex)
	}
	if ex.Exit != 0 {
		return exitError{code: ex.Exit}
	}
	return nil
}

func explorable() []string {
	var ids []string
	for _, e := range labExperiments() {
		if e.Explore != nil {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// actorLine: "A: read, debit, commit · B: read, debit, commit".
func actorLine(actors []lab.ActorSpec) string {
	parts := make([]string, len(actors))
	for i, a := range actors {
		labels := make([]string, len(a.Steps))
		for j, s := range a.Steps {
			labels[j] = s.Label
		}
		parts[i] = a.Name + ": " + strings.Join(labels, ", ")
	}
	return strings.Join(parts, " · ")
}

func scheduleRow(n int, s lab.ScheduleOutcome) string {
	row := fmt.Sprintf("  %3d  %-24s %-11s", n, s.Schedule, s.Outcome)
	if len(s.Violated) > 0 {
		row += " violated " + strings.Join(s.Violated, ",")
	}
	if len(s.Blocked) > 0 {
		row += " blocked " + strings.Join(s.Blocked, ",")
	}
	return strings.TrimRight(row, " ")
}

func printExploration(out io.Writer, ex lab.Exploration) {
	for i, s := range ex.Schedules {
		fmt.Fprintln(out, scheduleRow(i+1, s))
	}
	mode := ex.Mode
	switch ex.Mode {
	case "exhaustive":
		mode = fmt.Sprintf("exhaustive: of the %d orders of the steps, those the run allowed (none releases an actor blocked on a lock or finished early)", ex.Orders)
		if ex.Reduced > 0 {
			mode += fmt.Sprintf(", %d branches skipped as equivalent", ex.Reduced)
		}
	case "sampled":
		mode = fmt.Sprintf("sampled: %d orders of the steps exceed --max; uniform random walk, seed %d", ex.Orders, ex.Seed)
	case "serial":
		mode = "serial: each actor runs all its steps before the next (the control)"
	}
	fmt.Fprintf(out, "\n%s (%s; %.1fs)\n", ex.Summary, mode, ex.Seconds)
	if ex.Variant == lab.Naive.String() && ex.Breaking > 0 {
		var caught []string
		for _, s := range ex.Schedules {
			if s.Verdict == lab.Caught {
				caught = append(caught, s.Schedule)
			}
		}
		fmt.Fprintf(out, "caught under: %s\n", strings.Join(caught, "  "))
	}
	if ex.First != nil {
		r := *ex.First
		what := "first breaking schedule"
		if ex.Variant == lab.Naive.String() {
			what = "first schedule caught"
		}
		fmt.Fprintf(out, "\n%s: %s\n", what, r.Schedule)
		for _, s := range r.Timeline {
			fmt.Fprintf(out, "  %s\n", lab.FormatStep(s, r.Started))
		}
		for _, v := range r.Invariants {
			if !v.Holds && !(v.Schema && r.Naive && v.Error == "") {
				fmt.Fprintf(out, "  VIOLATED %s\n", strings.ReplaceAll(lab.FormatInvariant(v), "\n", "\n           "))
			}
		}
		for _, f := range r.Failures {
			fmt.Fprintf(out, "  assertion failed: %s\n", f)
		}
		fmt.Fprintf(out, "\nreplay: %s\n", ex.Replay)
	}
	fmt.Fprintf(out, "\n%s (exit %d).\n", ex.Summary, ex.Exit)
}
