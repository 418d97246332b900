package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/program"
)

const labUsage = `Usage:
  fencelab lab list [--json]                    chapters, their experiments and invariants
  fencelab lab run ID [--naive] [--control] [--json] [--schedule A,B,B,A]
                                                run one experiment on a scratch database
  fencelab lab explore ID [--naive|--control] [--json] [--max N] [--seed S]
                                                run it under every schedule of its actors

An experiment runs on a throwaway PostgreSQL cluster (or, with
--database-url, on scratch databases it creates and drops on that server):
never on the dev data. It prints its timeline (actor, database-clock time,
action, outcome, fence), the book's figure line and each invariant's result.

--naive runs the same timeline written the way the book says fails; one of
the chapter's data invariants must catch it. --control runs the naive code
with the race or the fault taken out (one actor, in-order delivery, no
crash); it must hold. --naive --control runs both and shows them side by
side: the naive code alone does not break the invariant, the interleaving
does.

explore runs an experiment that declares actors and steps under every
schedule: every actor is held at its next step and exactly one is
released at a time; an actor seen waiting on a PostgreSQL lock is a
blocked step and the next choice goes to another. A schedule is the
sequence of choices, "A,B,B,A"; each runs on a fresh database. It prints
"N schedules: guarded holds in N of N" (or "naive caught in K of N"),
each schedule's outcome and the first breaking one as a timeline with
the command that replays it: lab run ID --naive --schedule A,B,B,A.
Above --max orders it samples --max of them (seeded by --seed).

Exit codes (lab run and lab explore; an exploration holds when every
schedule held, is caught when at least one schedule was caught):
  0  every invariant held (a guarded run or a control)
  1  an invariant reported rows: a naive run caught as predicted, or a
     broken guarded run or control (the output says which)
  2  usage
  3  a naive run that was not caught: the experiment is broken
`

// labExperiments is the registry lab run and lab list read (a test
// replaces it with toy experiments).
var labExperiments = program.Experiments

func runLab(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Print(labUsage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "list":
		return labList(args[1:])
	case "run":
		return labRun(args[1:])
	case "explore":
		return labExplore(args[1:])
	}
	fmt.Fprintf(os.Stderr, "fencelab lab: unknown verb %q\n\n%s", args[0], labUsage)
	return errUsage
}

func labList(args []string) error {
	fs := newFlags("lab list", "lab list [--json]")
	asJSON := fs.Bool("json", false, "print one JSON document")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	exps := labExperiments()
	type expView struct {
		ID         string   `json:"id"`
		Test       string   `json:"test,omitempty"`
		Claim      string   `json:"claim"`
		Invariants []string `json:"invariants"`
		Naive      string   `json:"naive,omitempty"`
		Catches    []string `json:"catches,omitempty"`
		Control    string   `json:"control,omitempty"`
		Explorable bool     `json:"explorable,omitempty"` // lab explore runs it under every schedule
	}
	type chapterView struct {
		N           int       `json:"n"`
		Slug        string    `json:"slug"`
		Title       string    `json:"title"`
		Experiments []expView `json:"experiments"`
	}
	var chapters []chapterView
	for _, c := range lab.Chapters {
		cv := chapterView{N: c.N, Slug: c.Slug, Title: c.Title, Experiments: []expView{}}
		for _, e := range exps {
			if strings.HasPrefix(e.ID, c.Slug+"/") {
				cv.Experiments = append(cv.Experiments, expView{e.ID, e.Test, e.Claim, e.Invariants, e.Naive, e.Catches, e.Control, e.Explore != nil})
			}
		}
		chapters = append(chapters, cv)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"chapters": chapters})
	}
	for _, c := range chapters {
		fmt.Printf("%2d %s — %s\n", c.N, c.Slug, c.Title)
		for _, e := range c.Experiments {
			naive := "      "
			if e.Naive != "" {
				naive = "naive "
			}
			fmt.Printf("     %-36s %s%s\n", e.ID, naive, e.Claim)
			fmt.Printf("     %-36s       checks %s\n", "", strings.Join(e.Invariants, " "))
			if e.Control != "" {
				fmt.Printf("     %-36s       control: %s\n", "", e.Control)
			}
			if e.Explorable {
				fmt.Printf("     %-36s       every schedule: fencelab lab explore %s\n", "", e.ID)
			}
		}
	}
	fmt.Println("\nRun one: fencelab lab run ID   (add --naive to watch the invariant catch the naive version,\n" +
		"         --control to run the naive code without its race, both to see them side by side)")
	return nil
}

func labRun(args []string) error { return labRunTo(os.Stdout, args) }

// parseExperimentArgs parses a `lab run`/`lab explore` command line: the
// experiment's ID, before or after the flags (lab run points/x --naive),
// and the flags. A missing or unknown ID is a usage error, said on stderr;
// listHint ends the message ("shows them", "marks the explorable ones").
func parseExperimentArgs(fs *flag.FlagSet, args []string, cmd, listHint string) (lab.Experiment, error) {
	var id string
	rest := args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return lab.Experiment{}, errUsage
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	}
	if id == "" {
		fmt.Fprintf(os.Stderr, "fencelab %s: which experiment? `fencelab lab list` %s\n", cmd, listHint)
		return lab.Experiment{}, errUsage
	}
	e, ok := lab.Find(labExperiments(), id)
	if !ok {
		fmt.Fprintf(os.Stderr, "fencelab %s: no experiment %q; `fencelab lab list` shows them\n", cmd, id)
		return lab.Experiment{}, errUsage
	}
	return e, nil
}

func labRunTo(out io.Writer, args []string) error {
	fs := newFlags("lab run", "lab run ID [--naive] [--control] [--json] [--database-url URL]")
	naive := fs.Bool("naive", false, "run the naive version (the one the invariant catches)")
	control := fs.Bool("control", false, "run the naive version's control (the naive code without its race or fault); with --naive, both side by side")
	asJSON := fs.Bool("json", false, "print the timeline and results as one JSON document")
	url := fs.String("database-url", "", "a PostgreSQL server to make scratch databases on (default: a throwaway local cluster)")
	timeout := fs.Duration("timeout", 5*time.Minute, "overall time limit")
	schedule := fs.String("schedule", "", "run the experiment's actors under this schedule (\"A,B,B,A\", as lab explore prints it)")
	e, err := parseExperimentArgs(fs, args, "lab run", "shows them")
	if err != nil {
		return err
	}
	id := e.ID
	switch {
	case *naive && e.Naive == "":
		fmt.Fprintf(os.Stderr, "fencelab lab run: %s has no naive version\n", id)
		return errUsage
	case *control && e.Control == "":
		fmt.Fprintf(os.Stderr, "fencelab lab run: %s has no control\n", id)
		return errUsage
	case *schedule != "" && e.Explore == nil:
		fmt.Fprintf(os.Stderr, "fencelab lab run: %s declares no actors to schedule (--schedule)\n", id)
		return errUsage
	case *schedule != "" && *naive && *control:
		fmt.Fprint(os.Stderr, "fencelab lab run: --schedule replays one variant: --naive or --control, not both\n")
		return errUsage
	}
	var variants []lab.Variant
	switch {
	case *naive && *control:
		variants = []lab.Variant{lab.Naive, lab.Control}
	case *naive:
		variants = []lab.Variant{lab.Naive}
	case *control:
		variants = []lab.Variant{lab.Control}
	default:
		variants = []lab.Variant{lab.Guarded}
	}
	ctx, cluster, done, err := scratchCluster(*timeout, *url, id, *asJSON)
	if err != nil {
		return err
	}
	defer done()
	var results []lab.Result
	for _, v := range variants {
		if *schedule != "" {
			results = append(results, lab.RunSchedule(ctx, e, cluster, v, lab.ParseSchedule(*schedule)))
			continue
		}
		results = append(results, lab.RunVariant(ctx, e, cluster, v))
	}
	code, message := results[0].Exit, results[0].Message()
	if len(results) == 2 {
		code, message = pairVerdict(results[0], results[1])
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		var doc any = results[0]
		if len(results) == 2 {
			doc = map[string]any{"id": id, "naive": results[0], "control": results[1], "exit": code, "message": message}
		}
		if err := enc.Encode(doc); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			printResult(out, r)
		}
		if len(results) == 2 {
			printBeside(out, results[0], results[1])
		}
		fmt.Fprintf(out, "\n%s (exit %d).\n", message, code)
	}
	if code != 0 {
		return exitError{code: code}
	}
	return nil
}

// pairVerdict is the exit of a naive run shown beside its control: the
// naive run's, unless the control broke too — then the catch does not
// depend on the race, and the experiment is broken (3).
func pairVerdict(naive, control lab.Result) (int, string) {
	if control.Verdict != lab.Held {
		return 3, "BROKEN EXPERIMENT: the control broke as well, so the naive version's catch does not depend on the race"
	}
	return naive.Exit, naive.Message() + "; the control held"
}

func printResult(out io.Writer, r lab.Result) {
	title := r.ID
	if r.Variant != lab.Guarded.String() {
		title += " (" + r.Variant + ")"
	}
	if r.Schedule != "" {
		title += " under schedule " + r.Schedule
	}
	fmt.Fprintf(out, "%s\n  %s\n", title, r.Claim)
	if r.Naive {
		fmt.Fprintf(out, "  naive version: %s\n", r.NaiveHow)
	}
	if r.Control {
		fmt.Fprintf(out, "  control: %s\n", r.ControlHow)
	}
	fmt.Fprintln(out, "\ntimeline (database clock, from the first step):")
	for _, s := range r.Timeline {
		fmt.Fprintf(out, "  %s\n", lab.FormatStep(s, r.Started))
	}
	if len(r.Figure) > 0 {
		fmt.Fprintf(out, "\nfigure: %s\n", lab.FigureLine(r.Figure))
	}
	if len(r.Invariants) > 0 {
		fmt.Fprintln(out, "\ninvariants:")
	}
	for _, v := range r.Invariants {
		if v.Holds {
			fmt.Fprintf(out, "  held      %-10s %s\n", v.ID, v.Statement)
		}
	}
	for _, v := range r.Invariants {
		if !v.Holds {
			label := "VIOLATED "
			if v.Schema && r.Naive && v.Error == "" {
				label = "schema   " // the naive schema, set up on purpose: it does not decide the run
			}
			fmt.Fprintf(out, "  %s %s\n", label, strings.ReplaceAll(lab.FormatInvariant(v), "\n", "\n            "))
		}
	}
	for _, f := range r.Failures {
		fmt.Fprintf(out, "\nassertion failed: %s\n", f)
	}
	fmt.Fprintf(out, "\n%s: %s.\n\n", r.Variant, r.Message())
}

// printBeside sets the naive run and its control side by side: their
// figures and each invariant's outcome, one line per invariant.
func printBeside(out io.Writer, naive, control lab.Result) {
	fmt.Fprintf(out, "naive beside control (%s):\n", control.ControlHow)
	fmt.Fprintf(out, "  %-12s %-28s %s\n", "", "naive", "control")
	fmt.Fprintf(out, "  %-12s %-28s %s\n", "steps", fmt.Sprint(len(naive.Timeline)), fmt.Sprint(len(control.Timeline)))
	fmt.Fprintf(out, "  %-12s %-28s %s\n", "figure", lab.FigureLine(naive.Figure), lab.FigureLine(control.Figure))
	outcome := func(r lab.Result, id string) string {
		for _, v := range r.Invariants {
			switch {
			case v.ID != id:
			case v.Holds:
				return "held"
			case v.Error != "":
				return "check failed"
			case v.Schema:
				return "schema guard absent"
			default:
				return fmt.Sprintf("VIOLATED (%d rows)", len(v.Rows))
			}
		}
		return "not checked"
	}
	for _, v := range naive.Invariants {
		fmt.Fprintf(out, "  %-12s %-28s %s\n", v.ID, outcome(naive, v.ID), outcome(control, v.ID))
	}
}

// scratchCluster is where `lab run` and `lab explore` run experiment id: a
// scratch PostgreSQL cluster (the one at url when given), under a context
// that ends after timeout or at ^C. done closes the cluster and the context.
func scratchCluster(timeout time.Duration, url, id string, quiet bool) (ctx context.Context, cluster *labenv.Cluster, done func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	if !quiet {
		fmt.Fprintf(os.Stderr, "provisioning a scratch PostgreSQL for %s …\n", id)
	}
	cluster, err = labenv.NewCluster(ctx, url, program.Lab())
	if err != nil {
		stop()
		cancel()
		return nil, nil, nil, err
	}
	return ctx, cluster, func() { cluster.Close(); stop(); cancel() }, nil
}
