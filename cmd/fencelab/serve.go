package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/faults"
)

func runServe(args []string) error {
	loadLocalEnv("")
	cfg := app.Defaults()
	fs := newFlags("serve", "serve [flags]")
	cfg.Bind(fs)
	migrate := fs.Bool("migrate", false, "apply pending migrations before serving")
	var pauseAt multiFlag
	fs.Var(&pauseAt, "pause-at", "fault point to pause at (experiments): print PAUSED <point> <key> and wait for a line on stdin (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var set *faults.Set
	if len(pauseAt) > 0 {
		set = faults.New()
		lines := faults.NewLines(os.Stdin)
		for _, name := range pauseAt {
			set.PauseOnLines(name, lines, os.Stdout)
		}
	}
	p, err := openProcess(ctx, cfg, "serve", *migrate, set)
	if err != nil {
		return err
	}
	defer p.close()
	logStart(p.deps.Log, "serving", cfg)
	return serveUntilDone(ctx, p, nil)
}

// serveUntilDone serves HTTP and runs the background tasks until ctx ends,
// then shuts both down within the grace period. ready, if set, is called
// with the bound address once the listener is open.
func serveUntilDone(ctx context.Context, p *process, ready func(addr string)) error {
	cfg := p.deps.Config
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	e := app.NewHTTP(p.deps, p.mods)
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}

	taskCtx, cancelTasks := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); app.RunTasks(taskCtx, p.deps.Log, p.mods) }()
	wg.Add(1)
	go func() { defer wg.Done(); _ = app.RunJobs(taskCtx, p.deps, claim.PoolOptions{}) }()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// One grace in total: HTTP drains while the jobs get the same grace
	// (claim.Work bounds itself by it), side by side, not one after the other.
	p.deps.Log.Info("shutting down", "grace", cfg.ShutdownGrace)
	shCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	cancelTasks()
	_ = srv.Shutdown(shCtx)
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func runWorker(args []string) error {
	loadLocalEnv("")
	cfg := app.Defaults()
	fs := newFlags("worker", "worker [flags]")
	cfg.Bind(fs)
	var pauseAt multiFlag
	fs.Var(&pauseAt, "pause-at", "fault point to pause at: print PAUSED <point> <key> and wait for a line on stdin (repeatable)")
	startGate := fs.Bool("start-gate", false, "print READY and wait for a line on stdin before starting work")
	migrate := fs.Bool("migrate", false, "apply pending migrations before starting")
	exitWhenIdle := fs.Bool("exit-when-idle", false, "exit once a claim comes back empty and no job is held (experiments)")
	kinds := fs.String("kinds", "", "comma-separated job kinds this worker runs (default: every registered kind)")
	tasks := fs.String("tasks", "", "run only these background tasks, comma-separated (e.g. outbox:social.likes), and no claim-engine jobs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var set *faults.Set
	lines := faults.NewLines(os.Stdin)
	if len(pauseAt) > 0 {
		set = faults.New()
		for _, name := range pauseAt {
			set.PauseOnLines(name, lines, os.Stdout)
		}
	}
	p, err := openProcess(ctx, cfg, "worker", *migrate, set)
	if err != nil {
		return err
	}
	defer p.close()
	var dedicated []app.Module
	if *tasks != "" {
		if dedicated, err = onlyTasks(p.mods, strings.Split(*tasks, ",")); err != nil {
			return err
		}
	}
	if *startGate {
		os.Stdout.WriteString("READY\n")
		if err := lines.Wait(ctx); err != nil {
			return err
		}
	}
	if dedicated != nil {
		p.deps.Log.Info("worker running only", "tasks", *tasks)
		app.RunTasks(ctx, p.deps.Log, dedicated)
		return nil
	}
	var only []string
	if *kinds != "" {
		for _, k := range strings.Split(*kinds, ",") {
			if _, ok := p.deps.Jobs.Kind(strings.TrimSpace(k)); !ok {
				return fmt.Errorf("--kinds: no job kind %q (registered: %s)", k, strings.Join(p.deps.Jobs.KindNames(), ", "))
			}
			only = append(only, strings.TrimSpace(k))
		}
	}
	logStart(p.deps.Log, "worker running", cfg)
	taskCtx, stopTasks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { app.RunTasks(taskCtx, p.deps.Log, p.mods) })
	err = app.RunJobs(ctx, p.deps, claim.PoolOptions{ExitWhenIdle: *exitWhenIdle, Kinds: only})
	stopTasks()
	wg.Wait()
	return err
}

// onlyTasks keeps the named tasks of mods (a process dedicated to one
// consumer, say); a name that matches no task is an error, not a silently
// idle process.
func onlyTasks(mods []app.Module, names []string) ([]app.Module, error) {
	var out []app.Module
	for _, name := range names {
		found := false
		for _, m := range mods {
			for _, t := range m.Tasks {
				if t.Name == strings.TrimSpace(name) {
					out = append(out, app.Module{Name: m.Name, Tasks: []app.Task{t}})
					found = true
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("--tasks: no task named %q", name)
		}
	}
	return out, nil
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return "" }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
