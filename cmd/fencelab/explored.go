package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/labenv"
	"github.com/fencelab/fencelab/program"
)

// The schedule tables of the chapter pages come from explorations run by
// `fencelab docs --explore` and recorded in docs/explored.json: running
// them takes minutes, so the drift test does not; it checks that every
// explorable experiment has a record made for the actors and steps it
// declares now, and that the pages show the record.

// exploredRecord is docs/explored.json.
type exploredRecord struct {
	Experiments []exploredExperiment `json:"experiments"`
}

type exploredExperiment struct {
	ID       string            `json:"id"`
	Actors   string            `json:"actors"` // actorLine: what the record was made for
	Orders   int               `json:"orders"`
	Variants []exploredVariant `json:"variants"`
}

type exploredVariant struct {
	Variant  string `json:"variant"`
	Mode     string `json:"mode"`
	Count    int    `json:"count"`
	Breaking int    `json:"breaking"`
	Summary  string `json:"summary"`
	First    string `json:"first,omitempty"` // the first breaking schedule
	Replay   string `json:"replay,omitempty"`
}

func exploredPath(chapters string) string { return filepath.Join(chapters, "..", "explored.json") }

func readExplored(chapters string) (exploredRecord, error) {
	var r exploredRecord
	b, err := os.ReadFile(exploredPath(chapters))
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

// current returns the record of e if it was made for the actors e
// declares now.
func (r exploredRecord) current(e lab.Experiment) (exploredExperiment, bool) {
	for _, x := range r.Experiments {
		if x.ID == e.ID && e.Explore != nil && x.Actors == actorLine(e.Explore.Actors) {
			return x, true
		}
	}
	return exploredExperiment{}, false
}

// exploreForDocs runs the guarded and naive explorations of every
// explorable experiment without a current record (of all of them when
// all is set) on a throwaway cluster and writes the record.
func exploreForDocs(chapters, url string, all bool) error {
	old, err := readExplored(chapters)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	fmt.Fprintln(os.Stderr, "provisioning a scratch PostgreSQL to explore every explorable experiment …")
	cluster, err := labenv.NewCluster(ctx, url, program.Lab())
	if err != nil {
		return err
	}
	defer cluster.Close()
	var rec exploredRecord
	for _, e := range lab.Sorted(labExperiments()) {
		if e.Explore == nil {
			continue
		}
		if kept, ok := old.current(e); ok && !all {
			rec.Experiments = append(rec.Experiments, kept)
			continue
		}
		xe := exploredExperiment{ID: e.ID, Actors: actorLine(e.Explore.Actors), Orders: lab.Orders(e.Explore.Actors)}
		variants := []lab.Variant{lab.Guarded}
		if e.Naive != "" {
			variants = append(variants, lab.Naive)
		}
		for _, v := range variants {
			ex := lab.ExploreExperiment(ctx, e, cluster, lab.ExploreOptions{Variant: v, Seed: 1, Parallel: 2})
			fmt.Fprintf(os.Stderr, "%s (%s): %s\n", e.ID, v, ex.Summary)
			if ex.Verdict == lab.Broke || ex.Verdict == lab.NotCaught {
				return fmt.Errorf("%s (%s): %s: fix the experiment before recording it", e.ID, v, ex.Summary)
			}
			xv := exploredVariant{Variant: v.String(), Mode: ex.Mode, Count: ex.Count, Breaking: ex.Breaking, Summary: ex.Summary, Replay: ex.Replay}
			if ex.First != nil {
				xv.First = ex.First.Schedule
			}
			xe.Variants = append(xe.Variants, xv)
		}
		rec.Experiments = append(rec.Experiments, xe)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(exploredPath(chapters), append(b, '\n'), 0o644)
}

// schedulesLines is an explorable experiment's part of the experiments
// block: the command, and the recorded table.
func schedulesLines(rec exploredRecord, e lab.Experiment) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- under every schedule of its actors (%s; %d orders of the steps): `fencelab lab explore %s`",
		actorLine(e.Explore.Actors), lab.Orders(e.Explore.Actors), e.ID)
	if e.Naive != "" {
		b.WriteString(" and `--naive`")
	}
	b.WriteString(" — " + e.Explore.Claim + "\n")
	x, ok := rec.current(e)
	if !ok {
		b.WriteString("\n_Not yet explored for these actors: `go run ./cmd/fencelab docs --explore` records it._\n")
		return b.String()
	}
	b.WriteString("\n| version | schedules | outcome | a breaking schedule |\n|---|---|---|---|\n")
	for _, v := range x.Variants {
		outcome := fmt.Sprintf("holds in %d of %d", v.Count-v.Breaking, v.Count)
		if v.Variant == lab.Naive.String() {
			outcome = fmt.Sprintf("caught in %d of %d", v.Breaking, v.Count)
		}
		first := "—"
		if v.First != "" {
			first = fmt.Sprintf("`%s`: `%s`", v.First, v.Replay)
		}
		fmt.Fprintf(&b, "| %s | %d (%s) | %s | %s |\n", v.Variant, v.Count, v.Mode, outcome, first)
	}
	return b.String()
}
