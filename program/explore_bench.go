package program

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/labenv"
)

// exploreBench is `fencelab bench explore`: one exploration of the lab, its
// schedules per second (each schedule is a fresh database cloned from the
// migrated template, the actors' real statements and the invariants
// checked). It lives in the composition root because it runs the lab
// (a bench package may not import the lab engine).
var exploreBench = app.Bench{Name: "explore",
	Summary: "lab explore: schedules per second of points/concurrent-debits (or --id, or --toy-steps N's two-actor toy)",
	Run:     runExploreBench}

func runExploreBench(_ []app.Module, args []string) error {
	fs := flag.NewFlagSet("bench explore", flag.ContinueOnError)
	id := fs.String("id", "points/concurrent-debits", "the experiment to explore")
	naive := fs.Bool("naive", false, "explore its naive version")
	maxN := fs.Int("max", lab.DefaultMax, "as lab explore --max")
	parallel := fs.Int("parallel", 2, "schedules run at once (each on its own database)")
	toy := fs.Int("toy-steps", 0, "instead of --id, two actors of N steps (1..6), each step one statement on the actor's own key: C(2N, N) schedules (4: 70)")
	url := fs.String("database-url", "", "a PostgreSQL server to make scratch databases on (default: a fresh local cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	e, ok := lab.Find(Experiments(), *id)
	if *toy != 0 {
		if *toy < 1 || *toy > 6 {
			return fmt.Errorf("bench explore: --toy-steps must be 1..6")
		}
		e, ok = toyExperiment(*toy), true
	}
	if !ok || e.Explore == nil {
		return fmt.Errorf("bench explore: %q is not an explorable experiment", *id)
	}
	v := lab.Guarded
	if *naive {
		v = lab.Naive
	}
	ctx := context.Background()
	fmt.Println("starting a fresh local PostgreSQL cluster for the lab …")
	cluster, err := labenv.NewCluster(ctx, *url, Lab())
	if err != nil {
		return err
	}
	defer cluster.Close()
	start := time.Now()
	ex := lab.ExploreExperiment(ctx, e, cluster, lab.ExploreOptions{Variant: v, Max: *maxN, Seed: 1, Parallel: *parallel,
		Progress: func(n int, s lab.ScheduleOutcome) {
			fmt.Printf("  %3d  %-24s %-10s %.2fs\n", n, s.Schedule, s.Outcome, s.Seconds)
		}})
	secs := time.Since(start).Seconds()
	fmt.Println(ex.Summary)
	fmt.Printf("RESULT explore id=%s variant=%s mode=%s parallel=%d orders=%d schedules=%d breaking=%d seconds=%.1f schedules_per_sec=%.2f\n",
		e.ID, v, ex.Mode, *parallel, ex.Orders, ex.Count, ex.Breaking, secs, float64(ex.Count)/secs)
	if ex.Verdict == lab.Broke || ex.Verdict == lab.NotCaught {
		return fmt.Errorf("bench explore: %s", ex.Summary)
	}
	return nil
}

// toyExperiment: two actors of n steps, each step one statement (an
// advisory lock on the actor's own key, held for the statement) on a
// fresh database — no step blocks another, so every one of the C(2n, n)
// orders is a schedule.
func toyExperiment(n int) lab.Experiment {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf("update %d", i+1)
	}
	return lab.Experiment{ID: fmt.Sprintf("bench/toy-%dx%d", 2, n), Claim: "two actors updating their own rows",
		Invariants: []string{"CORE-I0"},
		Explore: &lab.Explore{Claim: "every order of two actors' updates",
			Actors: []lab.ActorSpec{{Name: "A", Steps: lab.Steps(steps...)}, {Name: "B", Steps: lab.Steps(steps...)}},
			Run: func(x *lab.X) {
				db := x.Database()
				x.Interleave(func(a *lab.Actor) {
					p := a.Pool(db)
					for _, s := range steps {
						a.Step(s)
						if _, err := p.Exec(a.Context(), `SELECT pg_advisory_xact_lock($1)`, a.Index); err != nil {
							x.Error(a.Name, s, err)
							return
						}
						a.Say(s, lab.Accepted, "")
					}
				})
			}}}
}
