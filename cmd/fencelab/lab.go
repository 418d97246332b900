package main

import (
	"context"
	"encoding/json"
	"fmt"
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
  fencelab lab run ID [--naive] [--json]        run one experiment on a scratch database

An experiment runs on a throwaway PostgreSQL cluster (or, with
--database-url, on scratch databases it creates and drops on that server):
never on the dev data. It prints its timeline (actor, database-clock time,
action, outcome, fence), the book's figure line and each invariant's result.
Exit 0: the claim held. Exit 1: it did not — which is what --naive shows:
the same timeline written the way the book says fails, caught by the
chapter's invariant.
`

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
	exps := program.Experiments()
	type expView struct {
		ID         string   `json:"id"`
		Test       string   `json:"test,omitempty"`
		Claim      string   `json:"claim"`
		Invariants []string `json:"invariants"`
		Naive      string   `json:"naive,omitempty"`
		Catches    []string `json:"catches,omitempty"`
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
				cv.Experiments = append(cv.Experiments, expView{e.ID, e.Test, e.Claim, e.Invariants, e.Naive, e.Catches})
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
		}
	}
	fmt.Println("\nRun one: fencelab lab run ID   (add --naive to watch the invariant catch the naive version)")
	return nil
}

func labRun(args []string) error {
	fs := newFlags("lab run", "lab run ID [--naive] [--json] [--database-url URL]")
	naive := fs.Bool("naive", false, "run the naive version (the one the invariant catches)")
	asJSON := fs.Bool("json", false, "print the timeline and results as one JSON document")
	url := fs.String("database-url", "", "a PostgreSQL server to make scratch databases on (default: a throwaway local cluster)")
	timeout := fs.Duration("timeout", 5*time.Minute, "overall time limit")
	// Accept flags after the ID too (lab run points/x --naive).
	var id string
	rest := args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return errUsage
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	}
	if id == "" {
		fmt.Fprint(os.Stderr, "fencelab lab run: which experiment? `fencelab lab list` shows them\n")
		return errUsage
	}
	e, ok := lab.Find(program.Experiments(), id)
	if !ok {
		return fmt.Errorf("no experiment %q; `fencelab lab list` shows them", id)
	}
	if *naive && e.Naive == "" {
		return fmt.Errorf("%s has no naive version", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if !*asJSON {
		fmt.Fprintf(os.Stderr, "provisioning a scratch PostgreSQL for %s …\n", id)
	}
	cluster, err := labenv.NewCluster(ctx, *url, program.Lab())
	if err != nil {
		return err
	}
	defer cluster.Close()
	res := lab.Run(ctx, e, cluster, *naive)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printResult(res)
	}
	if !res.Holds {
		return exitError{code: 1}
	}
	return nil
}

func printResult(r lab.Result) {
	title := r.ID
	if r.Naive {
		title += " (naive)"
	}
	fmt.Printf("%s\n  %s\n", title, r.Claim)
	if r.Naive {
		fmt.Printf("  naive version: %s\n", r.NaiveHow)
	}
	fmt.Println("\ntimeline (database clock, from the first step):")
	for _, s := range r.Timeline {
		fmt.Printf("  %s\n", lab.FormatStep(s, r.Started))
	}
	if len(r.Figure) > 0 {
		fmt.Printf("\nfigure: %s\n", lab.FigureLine(r.Figure))
	}
	if len(r.Invariants) > 0 {
		fmt.Println("\ninvariants:")
	}
	for _, v := range r.Invariants {
		if v.Holds {
			fmt.Printf("  held      %-10s %s\n", v.ID, v.Statement)
		}
	}
	for _, v := range r.Invariants {
		if !v.Holds {
			fmt.Printf("  VIOLATED  %s\n", strings.ReplaceAll(lab.FormatInvariant(v), "\n", "\n            "))
		}
	}
	for _, f := range r.Failures {
		fmt.Printf("\nassertion failed: %s\n", f)
	}
	switch {
	case r.Naive && r.Caught:
		fmt.Println("\nCAUGHT: the naive version broke the invariant, as the book says it would (exit 1).")
	case r.Naive:
		fmt.Println("\nNOT CAUGHT: the naive run did not break its invariant this time (exit 1).")
	case r.Holds:
		fmt.Println("\nHOLDS: the claim held and every invariant held (exit 0).")
	default:
		fmt.Println("\nFAILED: the claim did not hold (exit 1).")
	}
}
