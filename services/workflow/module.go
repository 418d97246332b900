package workflow

import (
	"context"
	"fmt"
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
		Build: build,
	}
}

// build builds the workflow module: the workflow kind and POST /workflows.
func build(d app.Deps) (app.Runtime, error) {
	var tool Tool
	if url := app.Env(EnvToolURL, ""); url != "" {
		tool = fakeprovider.NewClient(url, 10*time.Second)
	} else {
		tool = &loopbackTool{}
	}
	s := &service{jobs: d.Jobs}
	return app.Runtime{
		Routes: func(e *echo.Echo) { routes(e, d.Auth, s) },
		Kinds:  []claim.Kind{NewKind(tool)},
	}, nil
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
