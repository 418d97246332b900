package workflow

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/claim"
	"github.com/fencelab/fencelab/core/fakeprovider"
)

// EnvToolURL points the workflow at an external tool (the e2e experiments
// pass the fake provider they read as ground truth). Unset, the process
// starts an in-process loopback fake provider on first use.
const EnvToolURL = "FENCELAB_WORKFLOW_TOOL_URL"

// Module is workflow: the workflow kind and its tool, run across a database failover.
func Module() app.Module {
	return app.Module{
		Name: "workflow", Chapter: "failover",
		// The claim chapter's experiments run this module's kind (their
		// IDs place them in chapter 2).
		Invariants: failoverInvariants, // FO-I1: what lab/failover's timeline must keep
		Build:      build,
	}
}

// build builds the workflow module: the workflow kind and POST /workflows.
func build(d app.Deps) (app.Runtime, error) {
	tool, err := toolFrom(d.Config)
	if err != nil {
		return app.Runtime{}, err
	}
	s := &service{jobs: d.Jobs}
	return app.Runtime{
		Routes: func(e *echo.Echo) { routes(e, d.Auth, s) },
		Kinds:  []claim.Kind{NewKind(tool)},
	}, nil
}

// toolFrom is the tool the settings name: the fake provider at
// FENCELAB_WORKFLOW_TOOL_URL, or the loopback one. It reads through the
// settings reader like every module setting, so a test can point one app
// at its own tool (app.Config.Settings) while another app in the same
// process keeps the loopback one.
func toolFrom(cfg app.Config) (Tool, error) {
	url := ""
	r := app.NewSettingsReader(cfg, "workflow")
	r.String(EnvToolURL, &url, checkToolURL)
	if err := r.Err(); err != nil {
		return nil, err
	}
	if url == "" {
		return &loopbackTool{}, nil
	}
	return fakeprovider.NewClient(url, 10*time.Second), nil
}

// checkToolURL accepts an absolute http(s) URL: a typo must stop the
// process at start, not fail every workflow call later.
func checkToolURL(v string) error {
	u, err := neturl.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http(s) URL")
	}
	return nil
}

// loopbackTool starts an in-process fake provider (idempotency keys and
// query by key, like the book's tool) the first time it is called, and keeps
// it for the life of the process.
type loopbackTool struct {
	once sync.Once
	c    *fakeprovider.Client
	err  error
}

func (l *loopbackTool) client() (*fakeprovider.Client, error) {
	l.once.Do(func() {
		srv, err := fakeprovider.Start(fakeprovider.Capabilities{Name: "tool", IdempotencyKeys: true, Query: true})
		if err != nil {
			l.err = fmt.Errorf("workflow: start loopback tool: %w", err)
			return
		}
		l.c = srv.Client()
	})
	return l.c, l.err
}

func (l *loopbackTool) Create(ctx context.Context, r fakeprovider.CreateRequest) (fakeprovider.Effect, error) {
	c, err := l.client()
	if err != nil {
		return fakeprovider.Effect{}, err
	}
	return c.Create(ctx, r)
}

func (l *loopbackTool) Find(ctx context.Context, q fakeprovider.Lookup) ([]fakeprovider.Effect, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	return c.Find(ctx, q)
}
