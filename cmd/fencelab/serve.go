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
	fs.Var(&pauseAt, "pause-at", pauseAtHelp)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	set, err := pauseSet(pauseAt, faults.NewLines(os.Stdin))
	if err != nil {
		return err
	}
	p, err := openProcess(ctx, cfg, "serve", *migrate, set)
	if err != nil {
		return err
	}
	defer p.Close()
	logStart(p.Deps.Log, "serving", cfg)
	return serveUntilDone(ctx, p, nil)
}

// serveUntilDone serves HTTP and runs the background tasks until ctx ends,
// then shuts both down within the grace period. ready, if set, is called
// with the bound address once the listener is open.
func serveUntilDone(ctx context.Context, p *app.Process, ready func(addr string)) error {
	ln, err := net.Listen("tcp", p.Deps.Config.Addr)
	if err != nil {
		return err
	}
	return serveOn(ctx, p, ln, ready)
}

// serveOn is serveUntilDone on a listener the caller opened (dev opens it
// before provisioning, to refuse a busy port at once).
func serveOn(ctx context.Context, p *app.Process, ln net.Listener, ready func(addr string)) error {
	cfg := p.Deps.Config
	var err error
	e := p.HTTP()
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}

	taskCtx, cancelTasks := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.RunTasks(taskCtx) }()
	wg.Add(1)
	go func() { defer wg.Done(); _ = p.RunJobs(taskCtx, claim.PoolOptions{}) }()

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
	p.Deps.Log.Info("shutting down", "grace", cfg.ShutdownGrace)
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
	cfg.BindNoHTTP(fs)
	var pauseAt multiFlag
	fs.Var(&pauseAt, "pause-at", pauseAtHelp)
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

	lines := faults.NewLines(os.Stdin)
	set, err := pauseSet(pauseAt, lines)
	if err != nil {
		return err
	}
	p, err := openProcess(ctx, cfg, "worker", *migrate, set)
	if err != nil {
		return err
	}
	defer p.Close()
	var dedicated []app.Running
	if *tasks != "" {
		if dedicated, err = onlyTasks(p.Mods, strings.Split(*tasks, ",")); err != nil {
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
		p.Deps.Log.Info("worker running only", "tasks", *tasks)
		app.RunTasks(ctx, p.Deps.Log, dedicated)
		return nil
	}
	var only []string
	if *kinds != "" {
		for _, k := range strings.Split(*kinds, ",") {
			if _, ok := p.Deps.Jobs.Kind(strings.TrimSpace(k)); !ok {
				return fmt.Errorf("--kinds: no job kind %q (registered: %s)", k, strings.Join(p.Deps.Jobs.KindNames(), ", "))
			}
			only = append(only, strings.TrimSpace(k))
		}
	}
	logStart(p.Deps.Log, "worker running", cfg)
	taskCtx, stopTasks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.RunTasks(taskCtx) })
	err = p.RunJobs(ctx, claim.PoolOptions{ExitWhenIdle: *exitWhenIdle, Kinds: only})
	stopTasks()
	wg.Wait()
	return err
}

// onlyTasks keeps the named tasks of mods (a process dedicated to one
// consumer, say); a name that matches no task is an error, not a silently
// idle process.
func onlyTasks(mods []app.Running, names []string) ([]app.Running, error) {
	var out []app.Running
	for _, name := range names {
		found := false
		for _, m := range mods {
			for _, t := range m.Tasks {
				if t.Name == strings.TrimSpace(name) {
					out = append(out, app.Running{Module: app.Module{Name: m.Name}, Runtime: app.Runtime{Tasks: []app.Task{t}}})
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
